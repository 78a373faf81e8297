"""Every benchmark script starts: it parses, imports and answers `--help` (a script that cannot start would only
be found by whoever next runs it: failover_bench's `--partitions` once failed to compile)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*_bench.py"))


def test_there_are_benchmarks() -> None:
    assert len(SCRIPTS) >= 10


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_a_benchmark_answers_help(script: Path) -> None:
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--out" in done.stdout


ISOLATION_PROBE = '''
import json, os, sys
from pathlib import Path
sys.path.insert(0, {bench!r})
from bench_outputs import keyed_providers_main

def run_one(provider, keys, work):
    return {{"provider": provider, "pid": os.getpid(), "keys": keys}}

def report(ours, spark, quick):
    return {{"ours": ours, "spark": spark, "parent": os.getpid()}}

sys.exit(keyed_providers_main(None, "probe", (3, 5), ("ours", "spark"), run_one, report,
                              lambda result, path: path.write_bytes(b""), lambda result: None))
'''


def test_each_provider_of_a_keyed_benchmark_runs_in_a_driver_process_of_its_own(tmp_path: Path) -> None:
    """A second application in one PySpark driver inherits the first one's confs (PySpark starts the driver's JVM
    with them as system properties): Spark's provider would run with our plugin. Each provider's `run_one` runs in
    a child process of its own and its result comes back to the parent."""
    script = tmp_path / "probe_bench.py"
    script.write_text(ISOLATION_PROBE.format(bench=str(BENCH)))
    out = tmp_path / "probe.json"
    done = subprocess.run([sys.executable, str(script), "--quick", "--out", str(out), "--workdir", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    import json

    result = json.loads(out.read_text())
    assert result["ours"]["provider"] == "ours" and result["spark"]["provider"] == "spark"
    assert result["ours"]["keys"] == result["spark"]["keys"] == 3
    pids = {result["ours"]["pid"], result["spark"]["pid"], result["parent"]}
    assert len(pids) == 3, result
