"""The cost a placement is judged by, in one unit: one byte carried over one switch hop.

Three parts, all linear in the placement except the load part, which is convex per node:

- traffic: every batch the primary ships its increment to each replica, so a placement costs
  `horizon_batches * sum over partitions of increment_bytes * sum over replicas of hops(primary, replica)`;
- load: a role on a busy node is dearer. The k-th role placed on node n costs, per batch,
  `load_weight * mean_increment * (n.load + k / n.capacity)`: the node's utilisation once that role is
  there, so each extra role costs more than the one before (convex, which spreads roles by capacity);
- migration: against the current placement, every new copy of a partition costs its `size_bytes`
  (a replica is bootstrapped from a snapshot), and every change of primary costs one `increment_bytes`
  (the hand-over: the new primary needs the last increment before it serves), both times
  `migration_weight`. Partitions without a current group start empty and migrate nothing.

`horizon_batches` is how many batches a placement is expected to last: it converts per-batch costs into
the same unit as one-off migration, so a role moves only when what it saves over the horizon exceeds the
bytes it costs to move.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class CostModel:
    """Weights of the placement cost (see the module docstring for the formula)."""

    horizon_batches: float = 100.0
    load_weight: float = 1.0
    migration_weight: float = 1.0

    def __post_init__(self) -> None:
        for name in ("horizon_batches", "load_weight", "migration_weight"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class CostBreakdown:
    """The three parts of a placement's cost, in byte-hops."""

    traffic: float
    load: float
    migration: float

    @property
    def total(self) -> float:
        """The sum of the parts."""
        return self.traffic + self.load + self.migration

    def to_json(self) -> dict[str, float]:
        """The parts and their total as a JSON object."""
        return {**asdict(self), "total": self.total}
