"""The entry point for the controller: choose or refresh the replica groups and plan the moves."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from placement.bounds import lower_bound
from placement.build import build_problem
from placement.changes import Change, apply_change
from placement.costs import CostBreakdown, CostModel
from placement.demand import PartitionDemand
from placement.failover_spread import spread_failover
from placement.groups import Placement, ReplicaGroup
from placement.handover import HandoverPlan, Strategy, plan_handover
from placement.moves import Move, diff_moves
from placement.solver import SolverSettings, solve_problem
from placement.topology import Topology


@dataclass(frozen=True)
class PlacementPlan:
    """A placement, what it costs, and how to get there from the current one."""

    placement: Placement
    cost: CostBreakdown
    lower_bound: float  # no placement of this problem costs less
    copies_per_rack: int  # most copies of one partition on one rack (1: distinct racks)
    moves: tuple[Move, ...]
    handover: HandoverPlan

    def to_json(self) -> dict[str, object]:
        """The plan as a JSON object."""
        return {
            "placement": self.placement.to_json(),
            "cost": self.cost.to_json(),
            "lower_bound": self.lower_bound,
            "copies_per_rack": self.copies_per_rack,
            "moves": [move.to_json() for move in self.moves],
            "handover": self.handover.to_json(),
        }


def plan_replica_groups(
    topology: Topology,
    demands: Sequence[PartitionDemand],
    replicas: int,
    current: Placement | None = None,
    cost_model: CostModel | None = None,
    strategy: Strategy | str = Strategy.BATCHED,
    settings: SolverSettings | None = None,
    pinned_primaries: Mapping[str, str] | None = None,
    around: Iterable[ReplicaGroup] = (),
) -> PlacementPlan:
    """Choose replica groups for `demands` on `topology`, or refresh `current` after a change.

    `topology` is the cluster as it is now: failed nodes absent, leaving nodes marked `draining`.
    Roles on absent or draining nodes are re-placed; every other role stays unless moving it saves more
    than its migration bytes over `cost_model.horizon_batches`. Raises `InfeasiblePlacement` when the
    request cannot be met.

    `pinned_primaries` (partition to node id) fixes primaries decided elsewhere (Spark runs a partition's
    task where it likes): those stay on their node, and only the replicas (and unpinned primaries) are
    chosen. A current replica on its partition's pinned node becomes that primary. Pins on nodes absent,
    draining or with too little room raise `InfeasiblePlacement`.

    `around`: groups of other partitions that stay as they are (a repair re-places some groups only); where each
    node's loss would send its partitions counts them too (`placement.failover_spread`).
    """
    problem = build_problem(
        topology, demands, replicas, cost_model or CostModel(), current, pinned_primaries
    )
    X, _ = solve_problem(problem, settings or SolverSettings())
    X = spread_failover(problem, X, around)  # equal cost, and a node's loss leaves the survivors even
    placement = problem.placement(X)
    moves = tuple(diff_moves(current, placement, demands, topology)) if current is not None else ()
    return PlacementPlan(
        placement=placement,
        cost=problem.evaluate(X),
        lower_bound=lower_bound(problem),
        copies_per_rack=problem.rack_limit,
        moves=moves,
        handover=plan_handover(moves, strategy),
    )


def replan(
    topology: Topology,
    demands: Sequence[PartitionDemand],
    current: Placement,
    change: Change,
    cost_model: CostModel | None = None,
    strategy: Strategy | str = Strategy.BATCHED,
    settings: SolverSettings | None = None,
    pinned_primaries: Mapping[str, str] | None = None,
) -> tuple[Topology, PlacementPlan]:
    """Apply `change` to `topology` and refresh `current` for it; returns the new topology and the plan."""
    after = apply_change(topology, change)
    return after, plan_replica_groups(
        after, demands, current.replicas, current, cost_model, strategy, settings, pinned_primaries
    )


def placement_cost(
    topology: Topology,
    demands: Sequence[PartitionDemand],
    placement: Placement,
    cost_model: CostModel | None = None,
) -> CostBreakdown:
    """What `placement` costs on `topology` as it stands (no migration): for status displays."""
    problem = build_problem(topology, demands, placement.replicas, cost_model or CostModel(), placement)
    if (problem.start < 0).any():
        raise ValueError("the placement does not fit the topology: some roles sit on absent or draining nodes")
    return problem.evaluate(problem.start)
