"""One cell of the fault suite's matrix: what it disturbs, where, how, and what shows it took effect."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from spark_provider.fault_suite.rig import Rig
from spark_provider.fault_suite.suite_query import SuiteQuery

Inject = Callable[[Rig, SuiteQuery], None]
# Partition 0's task is the one the executor fault points act in (any partition would do: one is enough).
PARTITION = 0


@dataclass(frozen=True)
class Scenario:
    """One cell of the matrix. `may_refuse`: a refusal passes when the query stops with an error containing it
    (a corrupted file must be named, never read as state); empty: only exact results pass."""

    name: str
    fault: str
    where: str
    inject: Inject
    heal: Callable[[Rig], None] | None = None
    heal_after: float = 0.0
    may_refuse: str = ""
    armed: bool = False  # the scenario arms a fault point: it passes only if the point fired
    warm_batches: int = 3  # batches before the fault
    # What shows the fault took effect where no fault point fires (a disk that filled up); None: nothing to show.
    took_effect: Callable[[Rig], bool] | None = None
    # The query commits with sync replication (a commit waits for one replica's ack, up to the node's bound).
    sync: bool = False
