"""The state node: one per executor, holding replicas of other nodes' partitions and shipping its own
primaries' increments to their replica groups (DESIGN.md sections 2 and 4).

Modules, one job each: `settings` (every knob), `logs` (structured JSON-lines logs), `increment_log`
(recent increments kept for pulls and lag), `replica` (a replica applying increments in version order),
`catch_up` (where missing increments come from), `bootstrap` (snapshots streamed in chunks), `shipper`
(streams to the replica group with acks and back-pressure), `membership` (register and heartbeat),
`service` (the gRPC servicers), `server` (the process), `cli` (`statestore node`).
"""
