"""The load-balancing policy: when one executor stays busier than the others, hand primaries over to even it out.

After every micro-batch the nodes report what each partition's batches cost (`PartitionLoad`, docs/node.md);
`statestore.controller.load` sums them per executor and core. The policy looks at each new batch (a look at
which some partition's primary reports another version than at the last look: any query's progress, a restarted
one's too) and counts the batches in a row in which the busiest executor's task time per
core was over `imbalance_factor` times the mean, or an executor ran no stateful task while another ran two or
more (one that joined: two executors becoming three is only 1.5x the mean). After `batches` of them it asks
`Operations.balance_load` for hand-overs, at most `max_moves`, with the batched strategy: role swaps inside the
replica groups first (one increment each, no copy), then moves to executors outside them (a warm-up copy each,
throttled by the nodes' bootstrap rate), and only if they lower the load over the mean (summed over executors)
by at least `min_gain` of the mean (hysteresis: an imbalance the moves cannot fix, a single hot partition, is
not chased). After an operation of its
own, or any operator command, it waits `cooldown_batches` (twice `batches` by default) before counting again,
so its own moves settle in the load reports first and it never oscillates. In `dry-run` mode it starts the
operation as a dry run: `statestore status` shows the moves it would make and why, and nothing moves.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from statestore.cluster.membership import Membership
from statestore.controller.load import ExecutorLoad, executor_loads, task_loads
from statestore.controller.operations import OperationError, Operations
from statestore.logs import log_event

_log = logging.getLogger("statestore.controller.load_balancer")

MODES = ("off", "dry-run", "on")


@dataclass(frozen=True)
class BalancerSettings:
    """The policy's settings (spark_provider settings `load_balancing*`)."""

    mode: str = "off"  # off, dry-run, on
    imbalance_factor: float = 1.5  # the busiest executor's load per core over the mean that counts as imbalance
    batches: int = 5  # batches in a row over the factor before acting
    min_gain: float = 0.1  # the moves must lower the load over the mean by this fraction of the mean
    max_moves: int = 2  # hand-overs per automatic operation
    cooldown_batches: int = -1  # batches to wait after an operation before counting again (-1: twice `batches`)
    interval_seconds: float = 1.0  # how often the policy looks at the load reports

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"load balancing mode {self.mode!r}: expected one of {', '.join(MODES)}")
        if self.imbalance_factor <= 1.0:
            raise ValueError(f"load balancing imbalance factor {self.imbalance_factor}: must be over 1")
        if self.batches < 1 or self.max_moves < 1:
            raise ValueError(
                f"load balancing batches ({self.batches}) and max moves ({self.max_moves}) must be at least 1"
            )

    @property
    def cooldown(self) -> int:
        """Batches to wait after an operation before counting again."""
        return self.cooldown_batches if self.cooldown_batches >= 0 else 2 * self.batches


@dataclass(frozen=True)
class Verdict:
    """One look at the load: the busiest executor, its load per core over the mean, and what the policy did."""

    batch: int
    busiest: str
    ratio: float
    over_for: int
    action: str  # "", "wait", "cooldown", "started N", "planned N", "no gain"


class LoadBalancer:
    """Watches the executors' load reports and starts balancing operations (see the module's docstring)."""

    def __init__(self, membership: Membership, operations: Operations, settings: BalancerSettings) -> None:
        self._membership = membership
        self._operations = operations
        self.settings = settings
        self._seen: dict[str, int] = {}  # partition key -> the version its primary reported at the last look
        self._batches = 0  # looks that found a new batch
        self._over_for = 0
        self._quiet_until = -1  # batch before which nothing is counted (cooldown)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last: Verdict | None = None

    def start(self) -> None:
        """Look at the load every `interval_seconds` on a daemon thread (nothing when the mode is off)."""
        if self.settings.mode == "off" or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="statestore-load-balancer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop looking."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.settings.interval_seconds):
            try:
                self.look()
            except Exception as exc:  # the policy must never take the controller down
                log_event(_log, "load_balancing_failed", logging.ERROR, error=repr(exc))

    def look(self) -> Verdict | None:
        """One look: count a new batch over the factor, act once `batches` in a row were. None when no new batch
        was committed since the last look or fewer than two executors report."""
        # Any partition's progress is a new batch. The highest version alone stalled the policy for as long as the
        # query holding it was idle or stopped (days behind a query whose versions were 50,000).
        seen = {p.key: p.report.version for p in self._membership.partitions()}
        if not seen or seen.items() <= self._seen.items():
            self._seen = seen
            return None
        self._seen = seen
        self._batches += 1
        batch = self._batches
        loads = executor_loads(self._membership, self._operations.draining())
        if len(loads) < 2 or not any(e.millis for e in loads.values()):
            self._over_for = 0  # "in a row" starts again once two executors report
            return None
        mean = sum(e.per_core for e in loads.values()) / len(loads)
        busiest = max(sorted(loads), key=lambda n: loads[n].per_core)
        ratio = loads[busiest].per_core / mean if mean else 1.0
        if self._operations.running or batch < self._quiet_until:
            if self._operations.running:
                self._quiet_until = batch + self.settings.cooldown
            self._over_for = 0
            return self._verdict(batch, busiest, ratio, "cooldown")
        if ratio <= self.settings.imbalance_factor and not self._idle_executor(loads):
            self._over_for = 0
            return self._verdict(batch, busiest, ratio, "")
        self._over_for += 1
        if self._over_for < self.settings.batches:
            return self._verdict(batch, busiest, ratio, "wait")
        self._over_for = 0
        self._quiet_until = batch + self.settings.cooldown
        return self._verdict(batch, busiest, ratio, self._act(loads, busiest, ratio, mean))

    @staticmethod
    def _idle_executor(loads: dict[str, ExecutorLoad]) -> str:
        """A live executor running no stateful task while another runs two or more (one that just joined: going
        from two executors to three is only 1.5x the mean), or ""."""
        idle = sorted(n for n, e in loads.items() if not e.tasks)
        if idle and any(len(e.tasks) >= 2 for e in loads.values()):
            return idle[0]
        return ""

    def _act(self, loads: dict[str, ExecutorLoad], busiest: str, ratio: float, mean: float) -> str:
        tasks = task_loads(self._membership)
        cores = {n: e.cores for n, e in loads.items()}
        executor = loads[busiest].executor_id
        idle = self._idle_executor(loads)
        why = (
            f"executor {loads[idle].executor_id} (node {idle}) runs no stateful task"
            if idle and ratio <= self.settings.imbalance_factor
            else f"factor {self.settings.imbalance_factor}"
        )
        notes = [
            f"automatic load balancing: executor {executor} (node {busiest}) ran {ratio:.2f}x the mean task time "
            f"per core ({loads[busiest].per_core:.0f} ms against {mean:.0f} ms per batch) for "
            f"{self.settings.batches} batches in a row ({why})"
        ]
        dry_run = self.settings.mode == "dry-run"
        try:
            status = self._operations.balance_load(
                tasks, cores, notes, self.settings.max_moves, self.settings.min_gain * mean, dry_run=dry_run
            )
        except OperationError as exc:
            log_event(_log, "load_balancing_refused", logging.WARNING, error=str(exc))
            return f"refused: {exc}"
        if status is None:
            log_event(_log, "load_balancing_no_gain", node=busiest, ratio=round(ratio, 2))
            return "no gain"
        log_event(
            _log,
            "load_balancing_started",
            operation=status.operation_id,
            moves=len(status.moves),
            dry_run=dry_run,
            node=busiest,
            ratio=round(ratio, 2),
        )
        return f"{'planned' if dry_run else 'started'} {len(status.moves)}"

    def _verdict(self, batch: int, busiest: str, ratio: float, action: str) -> Verdict:
        self.last = Verdict(batch, busiest, ratio, self._over_for, action)
        return self.last
