"""Plans for carrying out moves: all at once, one at a time (fluid), or in batches (Megaphone, sec. 3).

In a batched plan no node takes part in two moves of one batch, so every node ships or receives at
most one partition at a time; each batch is a maximum matching of the moves left (nodes as vertices,
moves as edges), so few batches are needed. The number of batches is at least the largest number of
moves any one node takes part in; `HandoverPlan.lower_bound` reports it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from placement.groups import Role
from placement.matching import maximum_matching
from placement.moves import Move


class Strategy(str, Enum):
    """How moves are grouped into batches that run one after another."""

    def __str__(self) -> str:  # as enum.StrEnum (Python 3.11+) prints: the value
        return self.value

    ALL_AT_ONCE = "all-at-once"
    FLUID = "fluid"
    BATCHED = "batched"


@dataclass(frozen=True)
class HandoverPlan:
    """Moves in batches: the moves of a batch run together, batches one after another."""

    strategy: Strategy
    batches: tuple[tuple[Move, ...], ...]

    @property
    def moves(self) -> tuple[Move, ...]:
        """Every move, in plan order."""
        return tuple(move for batch in self.batches for move in batch)

    @property
    def lower_bound(self) -> int:
        """Fewest batches any plan without a node twice in a batch could have."""
        busy = Counter(node for move in self.moves for node in move.participants)
        return max(busy.values(), default=1 if self.batches else 0)

    def to_json(self) -> dict[str, object]:
        """The plan as a JSON object."""
        return {
            "strategy": str(self.strategy),
            "batches": [[move.to_json() for move in batch] for batch in self.batches],
        }


def plan_handover(
    moves: Sequence[Move], strategy: Strategy | str = Strategy.BATCHED, primaries: Mapping[str, int] | None = None
) -> HandoverPlan:
    """Group `moves` into batches by `strategy`.

    With `primaries` (node -> primaries it holds now), the batches are ordered so that, after each one, no
    node holds more primary moves' worth of primaries than the most any node holds before or after the whole
    plan, where such an order exists (else the order that keeps the busiest node least busy, batch by batch). In
    Spark a primary is a task slot: a node that receives a partition before it gives one away runs one task
    more in that micro-batch, and the micro-batch waits for it.
    """
    strategy = Strategy(strategy)
    if not moves:
        return HandoverPlan(strategy, ())
    if strategy is Strategy.ALL_AT_ONCE:
        return HandoverPlan(strategy, (tuple(moves),))
    batches = [(move,) for move in moves] if strategy is Strategy.FLUID else _matched_batches(moves)
    if primaries is not None:
        batches = _balanced_order(batches, primaries)
    return HandoverPlan(strategy, tuple(batches))


def _balanced_order(batches: list[tuple[Move, ...]], primaries: Mapping[str, int]) -> list[tuple[Move, ...]]:
    """`batches` reordered greedily: next, the batch that leaves the busiest node least busy (ties: plan order)."""
    count = Counter(primaries)
    final = Counter(primaries)
    for batch in batches:
        _apply(final, batch)
    bound = max([*count.values(), *final.values()], default=0)
    left = list(batches)
    ordered = []
    while left:

        def peak(batch: tuple[Move, ...]) -> int:
            after = Counter(count)
            _apply(after, batch)
            return max(max(after.values(), default=0), bound)

        best = min(range(len(left)), key=lambda i: (peak(left[i]), i))
        _apply(count, left[best])
        ordered.append(left.pop(best))
    return ordered


def _apply(count: Counter, batch: tuple[Move, ...]) -> None:
    for move in batch:
        if move.role is Role.PRIMARY and move.source is not None and move.target is not None:
            count[move.source] -= 1
            count[move.target] += 1


def _matched_batches(moves: Sequence[Move]) -> list[tuple[Move, ...]]:
    # Bigger moves first, so that when several moves join the same two nodes the long transfers start early.
    left = sorted(moves, key=lambda move: -move.bytes)
    batches = []
    while left:
        batch = [move for move in left if not move.participants]
        vertex: dict[str, int] = {}
        for move in left:
            for node in move.participants:
                vertex.setdefault(node, len(vertex))
        edge_move: dict[tuple[int, int], Move] = {}
        alone = len(vertex)  # a move with one busy node gets a vertex of its own as the other end
        for move in left:
            # A node sending to itself (a replica it holds becoming the primary) is one end, not a loop the
            # matching would never take.
            ends = sorted({vertex[node] for node in move.participants})
            if len(ends) == 1:
                ends.append(alone)
                alone += 1
            if ends:
                edge_move.setdefault((min(ends), max(ends)), move)
        for u, v in maximum_matching(alone, edge_move):
            batch.append(edge_move[(min(u, v), max(u, v))])
        if not batch:  # never loop: whatever the matching made of them, the first move goes alone
            batch.append(left[0])
        chosen = {id(move) for move in batch}
        left = [move for move in left if id(move) not in chosen]
        batches.append(tuple(batch))
    return batches
