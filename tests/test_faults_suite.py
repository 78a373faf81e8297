"""`statestore faults`: its referee (the exact recomputation of every batch, and how it counts lost and duplicated
updates) on outputs tampered with on purpose, its report, and its quick run end to end against a real Spark
query on local-cluster (the subset CI runs)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from spark_provider.fault_suite import report, scenarios, schedule
from spark_provider.fault_suite.suite import Result, as_json
from spark_provider.fault_suite.suite_operators import OPERATORS
from spark_provider.fault_suite.suite_query import SuiteQuery, compare, expected_outputs, input_rows, recorded_outputs

ROOT = Path(__file__).resolve().parent.parent


def ran(tmp_path: Path, files_per_batch: list[int], operator: str = "aggregation") -> SuiteQuery:
    """A query directory as a run leaves it: batch b took `files_per_batch[b]` files (its offset log) and wrote
    exactly the recomputed outputs."""
    query = SuiteQuery(None, tmp_path, keys=50, rows=40, operator=operator)
    offsets = query.checkpoint / "offsets"
    offsets.mkdir(parents=True)
    taken = -1
    for batch, files in enumerate(files_per_batch):
        taken += files
        metadata = json.dumps({"batchWatermarkMs": 0})
        (offsets / str(batch)).write_text(f"v1\n{metadata}\n{json.dumps({'logOffset': taken})}")
    query.output_dir.mkdir(parents=True)
    for batch, rows in expected_outputs(query).items():
        (query.output_dir / f"{batch}.json").write_text(json.dumps([list(r) for r in rows]))
    return query


def test_an_untouched_run_is_exact_and_the_recomputation_follows_the_offset_log(tmp_path: Path) -> None:
    query = ran(tmp_path, [1, 2, 1])
    result = compare(query, 3)
    assert result.exact and result.batches == 3
    # Batch 1 took files 1 and 2: a key's count there is its rows in files 0..2.
    expected = expected_outputs(query)
    some_key, count, _ = expected[1][0]
    rows = [r for i in range(3) for r in input_rows(i, 50, 40, "faults")]
    assert count == sum(1 for r in rows if r["k"] == some_key)


def tamper(query: SuiteQuery, batch: int, change: object) -> None:
    rows = recorded_outputs(query.output_dir)[batch]
    (query.output_dir / f"{batch}.json").write_text(json.dumps([list(r) for r in change(rows)]))


def test_a_lost_update_a_duplicated_one_and_a_missing_output_are_counted(tmp_path: Path) -> None:
    query = ran(tmp_path, [1, 1, 1])
    last = expected_outputs(query)[2]
    key = next(k for k, n, _ in last if n >= 2)
    tamper(query, 2, lambda rows: [(k, n - 2, s) if k == key else (k, n, s) for k, n, s in rows])
    result = compare(query, 3)
    assert (result.differing, result.lost_updates, result.duplicated_updates) == ([2], 2, 0)

    query = ran(tmp_path / "dup", [1, 1, 1])
    tamper(query, 2, lambda rows: [(k, n + 1, s) if k == key else (k, n, s) for k, n, s in rows])
    result = compare(query, 3)
    assert (result.lost_updates, result.duplicated_updates) == (0, 1) and not result.exact

    query = ran(tmp_path / "missing", [1, 1, 1])
    (query.output_dir / "1.json").unlink()
    result = compare(query, 3)
    assert result.missing == [1] and not result.exact
    # A batch the commit log does not hold yet is not judged.
    assert compare(query, 1).exact


def _brute_force(operator: str, batches: list[list[dict]], batch: int) -> list[tuple]:
    """What `operator` outputs for `batch`, recomputed naively: its whole output over every row up to `batch`,
    less its whole output over the rows before it (the operators whose output is not running totals)."""

    def everything(rows: list[dict]) -> list[tuple]:
        if operator == "dropDuplicates":
            return sorted({(r["k"], r["v"] % 8) for r in rows})
        left = [r for r in rows if r["v"] % 2 == 0]
        right = [r for r in rows if r["v"] % 2 == 1]
        return sorted((a["k"], a["v"], b["v"]) for a in left for b in right if a["k"] == b["k"])

    before = [r for rows in batches[:batch] for r in rows]
    now = Counter(everything(before + batches[batch]))
    now.subtract(Counter(everything(before)))
    return sorted(now.elements())


@pytest.mark.parametrize("operator", ["dropDuplicates", "join"])
def test_the_recomputation_of_dedup_and_join_matches_a_naive_one(operator: str) -> None:
    batches = [input_rows(i, 30, 25, "faults") for i in range(5)]
    expected = OPERATORS[operator].expected(batches)
    for batch in range(5):
        assert expected.get(batch, []) == _brute_force(operator, batches, batch)
    assert sum(len(rows) for rows in expected.values()) > 20  # the input does make outputs


@pytest.mark.parametrize("operator", ["dropDuplicates", "join", "applyInPandasWithState"])
def test_every_operator_s_referee_counts_missing_and_repeated_output_rows(tmp_path: Path, operator: str) -> None:
    query = ran(tmp_path, [1, 1, 1], operator)
    assert compare(query, 3).exact
    rows = recorded_outputs(query.output_dir)[1]
    tamper(query, 1, lambda rows: rows[1:])
    result = compare(query, 3)
    assert result.differing == [1] and not result.exact
    if OPERATORS[operator].running_count:  # a later output of the key carries its total again
        assert result.lost_updates == 0
    else:
        assert (result.lost_updates, result.duplicated_updates) == (1, 0)
    tamper(query, 1, lambda _: [*rows, rows[0]])
    result = compare(query, 3)
    assert not result.exact and (OPERATORS[operator].running_count or result.duplicated_updates == 1)


def test_the_report_has_the_issues_keys_a_table_and_a_png(tmp_path: Path) -> None:
    results = [
        Result("a", "kill -9", "executor JVM at commit", "exact", True, True, 1200, 6),
        Result("b", "error", "state node at ship", "WRONG RESULTS", False, True, 0, 6, 0, 3, 1, "batches differing"),
    ]
    data = as_json(results, quick=True, master="local-cluster[3,1,1024]")
    assert {"scenarios", "passed", "lost_updates", "duplicated_updates", "results"} <= set(data)
    assert (data["scenarios"], data["passed"], data["lost_updates"], data["duplicated_updates"]) == (2, 1, 3, 1)
    png = report.write(data, tmp_path / "faults.json")
    assert png.stat().st_size > 1000 and json.loads((tmp_path / "faults.json").read_text()) == data
    text = report.table(data)
    assert "1/2 scenarios passed" in text and "b: batches differing" in text


def test_the_matrix_covers_what_the_issue_lists() -> None:
    names = {s.name for s in scenarios.MATRIX}
    assert len(names) == len(scenarios.MATRIX) >= 30
    assert set(scenarios.QUICK) <= names
    for point in ("load", "commit", "committed"):
        assert f"executor-kill-at-{point}" in names
    for point in ("ship", "apply", "applied", "materialize", "promote", "bootstrap-serve"):
        assert f"node-kill-at-{point}" in names
    assert {"node-restart-empty", "corrupt-increment", "executor-and-replica-node", "controller-link-cut"} <= names
    # Issue 26: the hand-over steps (source and target killed at each) and sync mode, 60 scenarios at least.
    assert len(names) + 1 >= 60  # and the driver's
    for step in ("warm-up", "steer"):
        assert {f"handover-kill-source-at-{step}", f"handover-kill-target-at-{step}"} <= names
    assert {"handover-node-kill-at-promote", "handover-kill-target-at-load"} <= names
    assert "handover-kill-source-at-promoted" in names
    synced = [s for s in scenarios.MATRIX if s.sync]
    assert len(synced) >= 8 and all(s.name.endswith("-sync") for s in synced)
    assert "executor-kill-at-acked-sync" in names


def test_a_random_schedule_is_the_same_for_its_seed_and_replays_from_its_file(tmp_path: Path) -> None:
    first = schedule.random_schedule(7, 12, 4)
    assert first == schedule.random_schedule(7, 12, 4) != schedule.random_schedule(8, 12, 4)
    kinds = {e.kind for seed in range(20) for e in schedule.random_schedule(seed, 12, 4)}
    assert {"move", "drain", "rebalance", "kill-executor", "kill-node", "restart-node-empty"} <= kinds
    assert {"replication-link", "controller-link"} <= kinds
    strategies = {e.strategy for seed in range(20) for e in schedule.random_schedule(seed, 12, 4) if e.strategy}
    assert strategies == set(schedule.STRATEGIES)
    schedule.write_replay(tmp_path / "seed-7.json", 7, first)
    assert schedule.read_replay(tmp_path / "seed-7.json") == (7, first)
    (tmp_path / "broken.json").write_text('{"seed": 1}')
    with pytest.raises(ValueError, match=r"broken\.json"):
        schedule.read_replay(tmp_path / "broken.json")


def test_the_quick_suite_passes_against_a_real_spark_query(tmp_path: Path) -> None:
    out = tmp_path / "faults.json"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "statestore.cli",
            "faults",
            "--quick",
            "--out",
            str(out),
            "--work-dir",
            str(tmp_path / "work"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["scenarios"] == len(scenarios.QUICK) == data["passed"]
    assert data["lost_updates"] == data["duplicated_updates"] == 0
    assert all(r["batches"] >= 6 for r in data["results"])
    assert all(r["fired"] is not False for r in data["results"])
    assert out.with_suffix(".png").exists() and "scenarios passed" in run.stdout


def test_a_random_schedule_runs_exact_against_a_real_spark_query(tmp_path: Path) -> None:
    """One seeded schedule of commands and faults (the CI form of `statestore faults --schedule random`)."""
    out = tmp_path / "schedules.json"
    command = [sys.executable, "-m", "statestore.cli", "faults", "--schedule", "random", "--seeds", "1"]
    command += ["--events", "5", "--out", str(out), "--work-dir", str(tmp_path / "work")]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert out.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    data = json.loads(out.read_text())
    assert {"schedules", "exact", "lost_updates", "duplicated_updates", "operations", "loads"} <= set(data)
    assert {"done", "failed", "failed_with_reason", "median_seconds", "max_seconds"} <= set(data["operations"])
    assert set(data["loads"]) == {"local", "replica", "peer", "checkpoint"}
    assert (data["schedules"], data["exact"], data["lost_updates"], data["duplicated_updates"]) == (1, 1, 0, 0), data
    assert data["operations"]["failed"] == data["operations"]["failed_with_reason"], data["operations"]
    assert data["operations"]["still_running"] == 0, data["results"]
    assert data["operations"]["over_bound"] == 0 and data["operations"]["bound_seconds"] == 60, data["results"]
    assert data["checkpoint_loads_after_settling"] == 0, data["results"]
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
