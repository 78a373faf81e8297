"""Running a random schedule (`schedule.py`) against a query of its own, and judging it.

The query runs one of the suite's stateful operators (`suite_operators.py`), picked by the seed so that the seeds in
a row cross every operator with both checkpoint formats. It warms up on three micro-batches; then each event of the
schedule runs and one micro-batch is fed after it (a link fault is healed once that batch ended). The schedule then
*settles*: every fault healed, the operations left running waited for (up to `SETTLE_OPERATIONS_SECONDS`),
`SETTLE_BATCHES` micro-batches fed and the replica groups back to q replicas at their primaries' versions; the
`AFTER_SETTLING` micro-batches fed after that must load nothing from the checkpoint location. Every micro-batch's
output is compared with the exact recomputation.
"""

from __future__ import annotations

import contextlib
import statistics
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from spark_provider import local_cluster
from spark_provider.fault_suite.rig import Rig
from spark_provider.fault_suite.schedule import Event
from spark_provider.fault_suite.suite_query import SuiteQuery, committed_batches, compare
from spark_provider.progress import load_sources
from statestore.controller.client import ControlClient, ControlError, in_flight
from statestore.waiting import wait_for

BATCH_TIMEOUT = 240.0
WAITED_COMMAND_SECONDS = 120.0  # a waited command past this is left running (settling waits for it again)
SETTLE_OPERATIONS_SECONDS = 180.0
SETTLE_BATCHES = 3
AFTER_SETTLING = 2
CONVERGE_SECONDS = 120.0
WARM_BATCHES = 3
# The bound an operation (done or failed) must end within, from its command: a command of several moves waits a
# micro-batch or two per move, and a fault ends a move within seconds (handover_scenarios.OPERATION_BOUND_SECONDS).
OPERATION_BOUND_SECONDS = 60.0
SOURCES = ("local", "replica", "peer", "checkpoint")
FORMAT_KEY = "spark.sql.streaming.stateStore.checkpointFormatVersion"


@dataclass
class Operation:
    """One operator command of the schedule and how it ended."""

    event: str
    operation_id: int = 0
    state: str = ""  # done, failed, refused (the command was not accepted), or still running
    seconds: float = 0.0
    reason: str = ""


@dataclass
class ScheduleResult:
    """One schedule's outcome, as the JSON shows it."""

    seed: int
    checkpoint_format: int = 1
    operator: str = "aggregation"
    events: list[str] = field(default_factory=list)
    exact: bool = False
    batches: int = 0
    lost_updates: int = 0
    duplicated_updates: int = 0
    operations: list[Operation] = field(default_factory=list)
    loads: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0))
    checkpoint_loads_after_settling: int = 0
    converged: bool = False
    unconverged: str = ""  # not converged: each partition's primary and replicas as the controller saw them
    detail: str = ""
    seconds: float = 0.0


@dataclass
class ScheduleRun:
    """Runs schedules on one rig (one Spark session), each under `root/seed-N`."""

    rig: Rig
    root: Path
    partitions: int = 4
    operators: tuple[str, ...] = ("aggregation",)

    def operator_for(self, seed: int) -> str:
        """The operator seed `seed` runs: seeds 2n and 2n+1 share one (formats 2 and 1), the next pair the next."""
        return self.operators[(seed // 2) % len(self.operators)]

    def run(self, seed: int, events: list[Event]) -> ScheduleResult:
        """Run `events` against a new query; never raises (a broken run is reported in `detail`)."""
        operator = self.operator_for(seed)
        result = ScheduleResult(seed, 2 if seed % 2 == 0 else 1, operator, [e.describe() for e in events])
        started = time.monotonic()
        # Even seeds write checkpoint format 2 (unique ids per version), odd ones format 1.
        conf = {FORMAT_KEY: "2"} if seed % 2 == 0 else {}
        root = self.root / f"seed-{seed}"
        query = SuiteQuery(self.rig.spark, root, seed=f"schedule-{seed}", conf=conf, operator=operator)
        try:
            self.rig.settle()
            query.feed(WARM_BATCHES)
            query.start()
            self._batch(query, "warming up")
            with contextlib.suppress(TimeoutError):
                wait_for(lambda: self.rig.converged(query), 60, "replicas at the primaries' versions")
            with self.rig.resuming_paused():
                for event in events:
                    self._event(event, query, result)
                    query.feed(1)
                    self._batch(query, event.describe())
                    self._heal()
                self._settle(query, result)
            settled_at = _last_batch(query)
            query.feed(AFTER_SETTLING)
            self._batch(query, "after settling")
            query.stop()
            self._judge(query, result, settled_at)
        except Exception as exc:
            result.detail = f"{exc}\n{traceback.format_exc(limit=3)}"
            with contextlib.suppress(Exception):
                query.stop()
            with contextlib.suppress(Exception):
                self._judge(query, result, None)
        finally:
            self._heal()
            self.rig.disarm()
            result.seconds = round(time.monotonic() - started, 1)
        return result

    # ------------------------------------------------------------------ events
    def _event(self, event: Event, query: SuiteQuery, result: ScheduleResult) -> None:
        rig = self.rig
        executors = sorted(rig.alive_nodes())
        picked = executors[event.pick % len(executors)] if executors else ""
        if event.kind in ("move", "drain", "rebalance"):
            result.operations.append(self._command(event, query, picked))
        elif event.kind == "kill-executor":
            # Never below two executors: the query needs somewhere to run (Spark restarts the killed one).
            if picked and len(local_cluster.executor_pids()) >= rig.executors:
                rig.kill_executor(picked)
        elif event.kind in ("kill-node", "restart-node-empty"):
            with contextlib.suppress(LookupError, TimeoutError):
                rig.kill_node(picked, empty=event.kind == "restart-node-empty")
        elif event.kind == "replication-link":
            rig.set_links(event.fault)
        elif event.kind == "controller-link":
            kind, _, number = event.fault.partition(" ")
            rig.proxy.set(kind, millis=int(number or 0), every=int(number or 1))

    def _command(self, event: Event, query: SuiteQuery, picked: str) -> Operation:
        operation = Operation(event.describe())
        try:
            with ControlClient(self.rig.controller) as client:
                if event.kind == "move":
                    status = client.move({str(event.partition): picked}, event.strategy, str(query.checkpoint))
                elif event.kind == "drain":
                    status = client.drain(picked, event.strategy)
                else:
                    status = client.rebalance(event.strategy)
                operation.operation_id = status.operation_id
                if event.wait:
                    # Waited for as a driver waits: the stream goes on meanwhile (the suite feeds its batches).
                    self._feed_until(
                        query,
                        lambda: not in_flight(client.operation(operation.operation_id)),
                        WAITED_COMMAND_SECONDS,
                        f"a batch while {event.describe()} ran",
                    )
                    status = client.operation(operation.operation_id)
                _record(operation, status)
        except ControlError as exc:  # refused at once (an unknown executor, nothing to do): says why
            operation.state = "refused"
            operation.reason = str(exc)
        return operation

    def _feed_until(self, query: SuiteQuery, done: Callable[[], bool], timeout: float, what: str) -> bool:
        """Feed one micro-batch at a time (data keeps arriving, as in a live stream) until `done()`, at most
        `timeout` seconds; whether it got there."""
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                return False
            query.feed(1)
            self._batch(query, what)
        return True

    def _heal(self) -> None:
        self.rig.set_links("pass")
        self.rig.proxy.set("pass")

    def _batch(self, query: SuiteQuery, what: str) -> None:
        if not query.wait_processed(BATCH_TIMEOUT):
            raise RuntimeError(f"the batch after {what} did not end: {query.failure() or 'timeout'}")

    # ------------------------------------------------------------------ settling and judging
    def _settle(self, query: SuiteQuery, result: ScheduleResult) -> None:
        """Heal, wait for the operations still running, feed SETTLE_BATCHES batches and wait for the groups."""
        self._heal()
        running = [o for o in result.operations if o.operation_id and o.state in ("", "queued", "running")]
        with ControlClient(self.rig.controller) as client:
            self._feed_until(
                query,
                lambda: not any(in_flight(client.operation(o.operation_id)) for o in running),
                SETTLE_OPERATIONS_SECONDS,
                "a batch while the operations still running ended",
            )
            for operation in running:
                _record(operation, client.operation(operation.operation_id))
        wanted = self.rig.executors
        wait_for(lambda: len(local_cluster.executor_pids()) >= wanted, 120, f"{wanted} executors running")
        query.feed(SETTLE_BATCHES)
        self._batch(query, "settling")
        try:
            wait_for(lambda: self.rig.converged(query), CONVERGE_SECONDS, "every group back at its primary's version")
            result.converged = True
        except TimeoutError:
            result.converged = False
            self.rig.keep_logs(query.root / "logs")
            result.unconverged = "; ".join(
                f"{p.store.store_id} primary {p.primary_node} v{p.primary_version} replicas "
                + (", ".join(f"{r.node_id} v{r.version_held}" for r in p.replicas) or "none")
                for p in self.rig.partitions(query)
            )

    def _judge(self, query: SuiteQuery, result: ScheduleResult, settled_at: int | None) -> None:
        comparison = compare(query, committed_batches(query.checkpoint))
        result.batches = comparison.batches
        result.lost_updates = comparison.lost_updates
        result.duplicated_updates = comparison.duplicated_updates
        result.exact = comparison.exact and not result.detail
        if not comparison.exact:
            result.detail = (
                f"batches differing {comparison.differing}, without output {comparison.missing}; " + result.detail
            )
        batches = _with_input(query.progress)
        for progress in batches[WARM_BATCHES:]:
            for source, count in load_sources(progress).items():
                result.loads[source] += count
        if settled_at is not None:
            result.checkpoint_loads_after_settling = sum(
                load_sources(p)["checkpoint"] for p in batches if p["batchId"] > settled_at
            )


def _record(operation: Operation, status: Any) -> None:
    operation.state = status.state
    operation.seconds = round(status.seconds, 1)
    reasons = [m.error for m in status.moves if m.step == "failed" and m.error]
    operation.reason = "; ".join(reasons) or status.error


def _last_batch(query: SuiteQuery) -> int:
    progress = _with_input(list(query.query.recentProgress))
    return progress[-1]["batchId"] if progress else -1


def _with_input(progress: list[dict]) -> list[dict]:
    last = {p["batchId"]: p for p in progress if p["numInputRows"] > 0}
    return [last[b] for b in sorted(last)]


def summary(results: list[ScheduleResult]) -> dict:
    """The JSON of a random-schedule run (the keys issue 26 names), with every schedule's details."""
    operations = [o for r in results for o in r.operations if o.state != "refused"]
    ended = [o for o in operations if o.state in ("done", "failed")]
    failed = [o for o in operations if o.state == "failed"]
    seconds = [o.seconds for o in ended]
    loads = {source: sum(r.loads[source] for r in results) for source in SOURCES}
    return {
        "schedules": len(results),
        "exact": sum(r.exact for r in results),
        "lost_updates": sum(r.lost_updates for r in results),
        "duplicated_updates": sum(r.duplicated_updates for r in results),
        "operations": {
            "done": sum(o.state == "done" for o in operations),
            "failed": len(failed),
            "failed_with_reason": sum(bool(o.reason) for o in failed),
            "still_running": len(operations) - len(ended),
            "refused": sum(o.state == "refused" for r in results for o in r.operations),
            "median_seconds": round(statistics.median(seconds), 1) if seconds else 0.0,
            "max_seconds": max(seconds, default=0.0),
            "bound_seconds": OPERATION_BOUND_SECONDS,
            "over_bound": sum(s > OPERATION_BOUND_SECONDS for s in seconds),
        },
        "loads": loads,
        "checkpoint_loads_after_settling": sum(r.checkpoint_loads_after_settling for r in results),
        "converged": sum(r.converged for r in results),
        "results": [asdict(r) for r in results],
    }
