"""`statestore faults`: the fault-injection suite, run against a real Spark query.

Each scenario (`scenarios.py`) gets a query of its own on one shared session (`local-cluster` with three executors
by default, or the user's `--master` whose executors run on this machine): the query is warmed up, the fault
injected, three more batches fed, and every batch's output compared with an exact recomputation (`suite_query.py`).
The driver scenario runs before the session starts, in two driver processes of its own: the first is killed with
SIGKILL (its whole process group: the driver JVM, its controller, its executors and their nodes) in the middle of
the query, the second restarts the query from its checkpoint.

A scenario passes when its outputs are exact (no update lost or applied twice, no committed batch without its
output), or, where the scenario allows it, the query stopped with an error naming what is broken; and, for a
scenario that arms a fault point, when the point fired.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from spark_provider.fault_suite.handover_scenarios import OPERATION_BOUND_SECONDS, SYNC_BOUND_MS
from spark_provider.fault_suite.rig import Rig, start_session
from spark_provider.fault_suite.scenario import Scenario
from spark_provider.fault_suite.suite_query import SuiteQuery, committed_batches, compare
from statestore.waiting import wait_for

AFTER_BATCHES = 3
MAX_AFTER_BATCHES = 15
BATCH_TIMEOUT = 240.0
DRIVER_SCENARIO = "driver-kill-and-restart"
SYNC_KEY = "spark.sql.streaming.stateStore.statestore.sync"
SLOW_SYNC = "for a replica's ack"


@dataclass
class Result:
    """One scenario's outcome, as the table and the JSON show it."""

    scenario: str
    fault: str
    where: str
    outcome: str = ""
    passed: bool = False
    fired: bool | None = None
    stall_ms: int = 0
    batches: int = 0
    checkpoint_loads: int = 0
    lost_updates: int = 0
    duplicated_updates: int = 0
    detail: str = ""
    seconds: float = 0.0
    sync: bool = False
    # Sync mode: the longest wait of a commit for its replica's ack, where one waited 2 s or more (else 0).
    max_sync_wait_ms: int = 0
    # The operations the scenario started: how each ended ("done", "failed: <reason>") and its seconds.
    operations: list[str] = field(default_factory=list)


@dataclass
class Suite:
    """Runs scenarios under `root` (kept for inspection: every query's checkpoint, input and outputs)."""

    root: Path
    master: str
    progress: Any = None  # called with each finished Result
    results: list[Result] = field(default_factory=list)

    def run(self, scenarios: list[Scenario], driver_scenario: bool) -> list[Result]:
        """Run the driver scenario (if asked) and then `scenarios`, one after another."""
        if driver_scenario:
            self._record(self._driver_kill())
        if not scenarios:
            return self.results
        faults_file = self.root / "faults"
        spark, controller = start_session(self.master, self.root, faults_file, "statestore-faults")
        rig = Rig(spark, self.root, faults_file, controller)
        try:
            for scenario in scenarios:
                self._record(self._run_one(rig, scenario))
        finally:
            rig.stop()
        return self.results

    def _record(self, result: Result) -> None:
        self.results.append(result)
        if self.progress is not None:
            self.progress(result)

    def _run_one(self, rig: Rig, scenario: Scenario) -> Result:
        result = Result(scenario.name, scenario.fault, scenario.where, sync=scenario.sync)
        started = time.monotonic()
        query = SuiteQuery(rig.spark, self.root / scenario.name, conf={SYNC_KEY: "true"} if scenario.sync else {})
        slow_syncs_before = set(rig.executor_log_lines(SLOW_SYNC)) if scenario.sync else set()
        try:
            rig.settle()
            query.feed(scenario.warm_batches)
            query.start()
            if not query.wait_processed(BATCH_TIMEOUT):
                raise RuntimeError(f"the query did not warm up: {query.failure() or 'timeout'}")
            with contextlib.suppress(TimeoutError):
                wait_for(lambda: rig.converged(query), 60, "replicas at the primaries' versions")
            warm = len(_with_input(query.query.recentProgress))
            scenario.inject(rig, query)
            error = self._feed_after(rig, scenario, query)
            operations_ok = self._operations_ended(rig, result)
            query.stop()
            unfired = rig.armed() if scenario.armed else None
            if scenario.took_effect is not None:
                unfired = not scenario.took_effect(rig)
            if scenario.sync:
                lines = set(rig.executor_log_lines(SLOW_SYNC)) - slow_syncs_before
                waits = [_waited_ms(line) for line in lines]
                result.max_sync_wait_ms = max(waits, default=0)
            self._judge(result, scenario, query, error, warm, unfired)
            if result.passed and not operations_ok:
                result.passed = False
                result.outcome += " (a move did not end in time, or failed without a reason)"
            if result.passed and result.max_sync_wait_ms > SYNC_BOUND_MS:
                result.passed = False
                result.outcome += f" (a sync commit waited {result.max_sync_wait_ms} ms, past {SYNC_BOUND_MS} ms)"
        except Exception as exc:  # the scenario itself broke: reported as such, the suite goes on
            result.outcome = "suite error"
            result.detail = f"{exc}\n{traceback.format_exc(limit=3)}"
            with contextlib.suppress(Exception):
                query.stop()
        finally:
            rig.disarm()
            result.seconds = round(time.monotonic() - started, 1)
        return result

    def _feed_after(self, rig: Rig, scenario: Scenario, query: SuiteQuery) -> str | None:
        """Feed the batches after the fault, one at a time; heal at `heal_after`. The query's error, if any."""
        timer = None
        if scenario.heal is not None:
            timer = threading.Timer(scenario.heal_after, scenario.heal, args=(rig,))
            timer.daemon = True
            timer.start()
        try:
            with rig.resuming_paused():
                fed = 0
                # A fault some later step reaches (a re-bootstrap after a node's restart, a restarted node's
                # writes) gets more batches, up to MAX_AFTER_BATCHES, before the scenario is judged.
                while fed < AFTER_BATCHES or (self._pending(rig, scenario) and fed < MAX_AFTER_BATCHES):
                    query.feed(1)
                    fed += 1
                    if not query.wait_processed(BATCH_TIMEOUT):
                        return query.failure() or f"a batch did not end within {BATCH_TIMEOUT:g}s"
            return None
        finally:
            if timer is not None:
                timer.join()  # the heal happens before the next scenario whatever happened here

    @staticmethod
    def _operations_ended(rig: Rig, result: Result) -> bool:
        """Wait (up to OPERATION_BOUND_SECONDS) for the operations the scenario started to end; record how each
        ended. True when each ended, and every failure names its reason."""
        ok = True
        for operation in rig.operations:
            try:
                status = wait_for(
                    lambda operation=operation: _ended(rig.operation(operation)),
                    OPERATION_BOUND_SECONDS,
                    f"operation {operation} to end",
                )
            except TimeoutError:
                status = rig.operation(operation)
                steps = ", ".join(f"{m.partition.split('@')[0]} {m.step}" for m in status.moves)
                result.operations.append(f"{status.state} after {status.seconds:.0f} s ({steps})")
                ok = False
                continue
            if status.state == "failed":
                reasons = [m.error for m in status.moves if m.step == "failed" and m.error] or [status.error]
                result.operations.append(f"failed after {status.seconds:.0f} s: {'; '.join(r for r in reasons if r)}")
                ok = ok and all(reasons) and any(reasons)
            else:
                result.operations.append(f"{status.state} in {status.seconds:.0f} s")
        return ok

    @staticmethod
    def _pending(rig: Rig, scenario: Scenario) -> bool:
        """Whether the scenario's fault has not taken effect yet (an armed point not reached, say)."""
        if scenario.armed and rig.armed():
            return True
        return scenario.took_effect is not None and not scenario.took_effect(rig)

    def _judge(
        self, result: Result, scenario: Scenario, query: SuiteQuery, error: str | None, warm: int, unfired: bool | None
    ) -> None:
        comparison = compare(query, committed_batches(query.checkpoint))
        result.batches = comparison.batches
        result.lost_updates = comparison.lost_updates
        result.duplicated_updates = comparison.duplicated_updates
        result.fired = None if unfired is None else not unfired
        batches = _with_input(query.progress)
        durations = [p["durationMs"]["triggerExecution"] for p in batches]
        steady = statistics.median(durations[1:warm] or durations[:1] or [0])
        result.stall_ms = max(0, int(max([d - steady for d in durations[warm:]] or [0])))
        result.checkpoint_loads = sum(_checkpoint_loads(p) for p in batches[warm:])
        wrong = comparison.differing or comparison.lost_updates or comparison.duplicated_updates
        if error is not None:
            first = error.strip().splitlines()[0][:300] if error.strip() else error
            refused = bool(scenario.may_refuse) and scenario.may_refuse in error and not wrong
            result.outcome = "refused, named the damage" if refused else "query failed"
            result.detail = first
            result.passed = refused
        elif wrong or comparison.missing:
            result.outcome = "WRONG RESULTS"
            result.detail = f"batches differing {comparison.differing}, without output {comparison.missing}"
        else:
            result.outcome = "exact"
            result.passed = True
        if result.fired is False:
            result.passed = False
            result.outcome += " (fault point not reached)" if scenario.armed else " (the fault had no effect)"

    def _driver_kill(self) -> Result:
        """The driver (and with it the controller, executors and nodes) killed mid-query, the query restarted."""
        result = Result(DRIVER_SCENARIO, "kill -9 of the driver's process group", "driver and controller")
        started = time.monotonic()
        root = self.root / DRIVER_SCENARIO
        try:
            first = _driver(root, self.master, files=12, log=self.root / "driver-1.log")
            try:
                wait_for(lambda: committed_batches(root / "checkpoint") >= 4, 300, "4 batches before the kill")
            finally:
                os.killpg(first.pid, signal.SIGKILL)
                first.wait(30)
            killed_at = committed_batches(root / "checkpoint")
            second = _driver(root, self.master, files=12, log=self.root / "driver-2.log")
            code = second.wait(600)
            query = SuiteQuery(None, root)
            comparison = compare(query, committed_batches(query.checkpoint))
            result.batches = comparison.batches
            result.lost_updates = comparison.lost_updates
            result.duplicated_updates = comparison.duplicated_updates
            if code != 0:
                result.outcome = "query failed"
                result.detail = f"the restarted driver exited with {code} (log: {self.root / 'driver-2.log'})"
            elif comparison.exact and comparison.batches >= 12:
                result.outcome = "exact"
                result.passed = True
                result.detail = f"killed after batch {killed_at - 1}; restarted from the checkpoint"
            else:
                result.outcome = "WRONG RESULTS" if not comparison.exact else "incomplete"
                result.detail = f"{comparison}"
        except Exception as exc:
            result.outcome = "suite error"
            result.detail = f"{exc}"
        result.seconds = round(time.monotonic() - started, 1)
        return result


def _ended(status: Any) -> Any:
    """The operation's status once it is neither queued nor running, else None."""
    return status if status.state not in ("queued", "running") else None


def _waited_ms(line: str) -> int:
    """The wait a provider's slow-sync log line reports (`... waited 10012 ms for a replica's ack`)."""
    words = line.split(" waited ", 1)[-1].split()
    return int(words[0]) if words and words[0].isdigit() else 0


def _with_input(progress: list[dict]) -> list[dict]:
    """The progress of the batches that had input (the last report of each batch id)."""
    last = {p["batchId"]: p for p in progress if p["numInputRows"] > 0}
    return [last[b] for b in sorted(last)]


def _checkpoint_loads(progress: dict) -> int:
    return sum(
        int(op.get("customMetrics", {}).get("statestoreLoadSourceCheckpoint", 0))
        for op in progress.get("stateOperators", [])
    )


def _driver(root: Path, master: str, files: int, log: Path) -> subprocess.Popen:
    """A driver process (`python -m spark_provider.fault_suite.driver_run`) in a process group of its own."""
    command = [
        sys.executable,
        "-m",
        "spark_provider.fault_suite.driver_run",
        "--root",
        str(root),
        "--master",
        master,
        "--files",
        str(files),
    ]
    with log.open("ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def as_json(results: list[Result], quick: bool, master: str) -> dict:
    """The JSON the suite writes (the keys issue 13 names: scenarios, passed, lost_updates, duplicated_updates,
    results)."""
    return {
        "master": master,
        "quick": quick,
        "scenarios": len(results),
        "passed": sum(r.passed for r in results),
        "lost_updates": sum(r.lost_updates for r in results),
        "duplicated_updates": sum(r.duplicated_updates for r in results),
        "results": [asdict(r) for r in results],
    }


logging.getLogger("py4j").setLevel(logging.WARNING)
