"""Placement of replica groups: where each state store partition's primary and replicas live.

The controller calls one function, to choose the replica groups and again after every change of the
cluster (a node joins, leaves, fails; loads shift):

    plan_replica_groups(
        topology: Topology,                # the cluster now: failed nodes absent, leaving nodes draining
        demands: Sequence[PartitionDemand],  # every partition: state size, increment bytes per batch
        replicas: int,                     # q: replicas per partition (q + 1 copies)
        current: Placement | None = None,  # the groups in force, if any
        cost_model: CostModel | None = None,
        strategy: Strategy | str = "batched",  # or "fluid", "all-at-once"
        settings: SolverSettings | None = None,
    ) -> PlacementPlan                     # .placement, .cost, .lower_bound, .moves, .handover

It raises `InfeasiblePlacement` (with the numbers) when the request cannot be met. `plan.placement[p]`
is partition p's `ReplicaGroup` (primary, replicas); `plan.moves` the copy moves and hand-overs from
`current`; `plan.handover.batches` their order. `replan(topology, demands, current, change)` applies one
change (`NodeJoined`, `NodeLeft`, `NodeFailed`, `LoadShifted`) first; `placement_cost` prices a
placement for status displays. The model, the solver and its optimality are described in
docs/placement.md.
"""

from placement.build import InfeasiblePlacement
from placement.changes import LoadShifted, NodeFailed, NodeJoined, NodeLeft, apply_change
from placement.costs import CostBreakdown, CostModel
from placement.demand import PartitionDemand
from placement.groups import Placement, ReplicaGroup, Role
from placement.handover import HandoverPlan, Strategy
from placement.moves import Move
from placement.plan import PlacementPlan, placement_cost, plan_replica_groups, replan
from placement.solver import SolverSettings
from placement.topology import Node, Topology

__all__ = [
    "CostBreakdown",
    "CostModel",
    "HandoverPlan",
    "InfeasiblePlacement",
    "LoadShifted",
    "Move",
    "Node",
    "NodeFailed",
    "NodeJoined",
    "NodeLeft",
    "PartitionDemand",
    "Placement",
    "PlacementPlan",
    "ReplicaGroup",
    "Role",
    "SolverSettings",
    "Strategy",
    "Topology",
    "apply_change",
    "placement_cost",
    "plan_replica_groups",
    "replan",
]
