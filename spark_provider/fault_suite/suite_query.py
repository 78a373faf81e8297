"""The streaming query the fault suite disturbs, and the exact recomputation its every batch is checked against.

A stateful operator (`suite_operators.py`: by default a keyed aggregation, per key the count and sum of `v`,
update mode) over a JSON file source fed one file per micro-batch. Each batch's output is written by
`foreachBatch` to `outputs/<batch id>.json` (a re-run batch overwrites it, as an idempotent sink does), so that
the outputs survive a killed driver. The recomputation reads
which files each batch took from the query's own checkpoint (its offset log: with one file per trigger, the
source's log offset is the index of the file), and replays them through the operator's recomputation: for the
aggregation, batch `b` must output, for each key its files hold, the key's count and sum over every file up to
`b`. A key whose count is below that lost updates; above it, updates were applied twice.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spark_provider.fault_suite.suite_operators import OPERATORS, Operator, Rows, update_differences
from spark_provider.file_feed import publish
from spark_provider.progress import files_processed

SCHEMA = "k string, v long"


def input_rows(index: int, keys: int, rows: int, seed: str) -> list[dict]:
    """The rows of input file `index`: `rows` rows `{k, v}` over `keys` keys (deterministic per seed and index)."""
    rng = random.Random(f"{seed}-{index}")
    return [{"k": f"key{rng.randrange(keys):06d}", "v": rng.randrange(1000)} for _ in range(rows)]


@dataclass
class SuiteQuery:
    """The query under `root` (`in/`, `checkpoint/`, `outputs/`), running `operator` (a name of
    `suite_operators.OPERATORS`), fed `rows` rows over `keys` keys per file (0: the operator's own numbers)."""

    spark: Any
    root: Path
    keys: int = 0
    rows: int = 0
    seed: str = "faults"
    fed: int = 0
    query: Any = None
    progress: list[dict] = field(default_factory=list)
    # SQL confs the query starts with (the session's are set for its start only): sync replication, say.
    conf: dict[str, str] = field(default_factory=dict)
    operator: str = "aggregation"

    def __post_init__(self) -> None:
        if self.operator not in OPERATORS:
            raise ValueError(f"unknown operator {self.operator!r}: one of {', '.join(OPERATORS)}")
        self.keys = self.keys or self.stateful.keys
        self.rows = self.rows or self.stateful.rows

    @property
    def stateful(self) -> Operator:
        """The operator the query runs."""
        return OPERATORS[self.operator]

    @property
    def input_dir(self) -> Path:
        return self.root / "in"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    @property
    def output_dir(self) -> Path:
        return self.root / "outputs"

    def feed(self, files: int = 1) -> None:
        """Publish the next `files` input files (each becomes one micro-batch)."""
        for _ in range(files):
            rows = input_rows(self.fed, self.keys, self.rows, self.seed)
            publish(self.input_dir, self.fed, "".join(json.dumps(r) + "\n" for r in rows))
            self.fed += 1

    def start(self) -> None:
        """Start (or restart from its checkpoint) the query on the session's provider."""
        self.input_dir.mkdir(parents=True, exist_ok=True)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self.fed = max(self.fed, len(list(self.input_dir.glob("b*.json"))))
        output_dir = self.output_dir
        operator = self.stateful

        def record(batch: Any, batch_id: int) -> None:
            rows = sorted(operator.row(r) for r in batch.collect())
            staging = output_dir / f".{batch_id}.json.tmp"
            staging.write_text(json.dumps(rows))
            staging.replace(output_dir / f"{batch_id}.json")

        stream = self.spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(self.input_dir))
        stateful = operator.build(stream)
        # A streaming query runs on a clone of the session taken at its start: confs set around the start are its own.
        for key, value in self.conf.items():
            self.spark.conf.set(key, value)
        try:
            self.query = (
                stateful.writeStream.outputMode(operator.output_mode)
                .foreachBatch(record)
                .option("checkpointLocation", str(self.checkpoint))
                .trigger(processingTime="0 seconds")
                .start()
            )
        finally:
            for key in self.conf:
                self.spark.conf.unset(key)

    def failure(self) -> str | None:
        """The query's error, if it stopped on one."""
        if self.query is None:
            return None
        error = self.query.exception()
        return None if error is None else str(error)

    def processed(self) -> int:
        """Input files its committed batches took so far."""
        return files_processed(self.query)

    def wait_processed(self, timeout: float, stop_waiting: Callable[[], bool] = lambda: False) -> bool:
        """Wait until every file fed so far was processed; False at the timeout, when the query failed, or when
        `stop_waiting()` says so."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.failure() is not None or stop_waiting():
                return False
            if self.processed() >= self.fed:
                return True
            time.sleep(0.1)
        return False

    def stop(self) -> None:
        """Stop the query (keeping its progress for the report)."""
        if self.query is not None:
            self.progress = list(self.query.recentProgress)
            self.query.stop()


def recorded_outputs(output_dir: Path) -> dict[int, Rows]:
    """Batch id -> the rows its last run wrote."""
    found = {}
    for path in output_dir.glob("*.json"):
        found[int(path.stem)] = [tuple(r) for r in json.loads(path.read_text())]
    return found


def batch_files(checkpoint: Path) -> dict[int, list[int]]:
    """Batch id -> the indexes of the input files it took, from the checkpoint's offset log (committed or
    planned: a planned batch is re-run with the same files after a restart)."""
    files = {}
    previous = -1
    offsets = checkpoint / "offsets"
    batches = sorted(int(p.name) for p in offsets.iterdir() if p.name.isdigit()) if offsets.is_dir() else []
    if batches and batches[0] != 0:
        raise ValueError(
            f"{offsets} starts at batch {batches[0]}: Spark purged the earlier entries, so which files those batches "
            "took is unknown (run with spark.sql.streaming.minBatchesToRetain above the batch count)"
        )
    for batch in batches:
        lines = (offsets / str(batch)).read_text().splitlines()[2:]  # after the version and the metadata
        offset = json.loads(lines[0])["logOffset"] if lines and lines[0] != "-" else previous
        files[batch] = list(range(previous + 1, offset + 1))
        previous = offset
    return files


def expected_outputs(query: SuiteQuery) -> dict[int, Rows]:
    """Batch id -> the rows the query's operator must output for it, replayed from the files each batch took."""
    taken = sorted(batch_files(query.checkpoint).items())
    inputs = [
        [row for index in indexes for row in input_rows(index, query.keys, query.rows, query.seed)]
        for _, indexes in taken
    ]
    by_position = query.stateful.expected(inputs)
    return {taken[position][0]: rows for position, rows in by_position.items()}


@dataclass(frozen=True)
class Comparison:
    """How a run's outputs compare with the recomputation: batches that differ, batches committed without a
    recorded output, and, per key at its last output, the updates (input rows) its count lacks or has twice."""

    batches: int
    differing: list[int]
    missing: list[int]
    lost_updates: int
    duplicated_updates: int

    @property
    def exact(self) -> bool:
        return not (self.differing or self.missing or self.lost_updates or self.duplicated_updates)


def compare(query: SuiteQuery, committed: int) -> Comparison:
    """Compare the recorded outputs of the first `committed` batches (those the commit log holds) with the
    recomputation."""
    expected = {b: rows for b, rows in expected_outputs(query).items() if b < committed}
    recorded = {b: rows for b, rows in recorded_outputs(query.output_dir).items() if b < committed}
    missing = [b for b in sorted(expected) if b not in recorded]
    differing = [
        b for b in sorted(set(expected) | set(recorded)) if b in recorded and sorted(recorded[b]) != expected.get(b, [])
    ]
    lost, duplicated = update_differences(query.stateful, expected, recorded)
    return Comparison(len(expected), differing, missing, lost, duplicated)


def committed_batches(checkpoint: Path) -> int:
    """How many batches the query's commit log holds (ids 0.. n-1)."""
    commits = checkpoint / "commits"
    ids = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []
    return max(ids) + 1 if ids else 0
