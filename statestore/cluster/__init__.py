"""The cluster as the controller knows it: its nodes, their partitions and replicas (`membership`). Below both the
controller and the hand-over protocols (handover/), which act on it."""
