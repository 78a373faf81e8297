"""The compatibility matrix: our provider on every supported Spark line, each in a virtual environment of its own.

    python bench/spark_lines_bench.py [--quick] --out FILE.json [--lines 4.0 4.1 ...]

For the latest patch release of each supported line (`LATEST`), a virtual environment `.venvs/pyspark-<version>`
(made on first use: this project installed editable, with that pyspark) runs the compatibility subset of the tests
against that line's own Spark and its own RocksDB provider:

- **operators_equal**: `tests/test_provider_operators.py`: every stateful operator's output on our provider equals
  Spark's RocksDB provider's on the same input;
- **api_equal**: `tests/test_provider_api.py`: the provider API transcript (gets, puts, removes, iterators, commits,
  aborts, reloads) equals Spark's RocksDB provider's;
- **failover_source**: `tests/test_failover_spark.py`'s q=1 aggregation with an executor killed between batches and
  before a commit: "replica" when every lost partition loaded from a replica and the outputs equal Spark's;
- **state_reader**: `tests/test_state_data_source.py`: Spark's state data source reads our checkpoints as it reads
  its own provider's.

`--quick` skips the state data source and keeps one operator test. `--failover-lines` runs failover_source on those
lines only ("not run" on the others; CI runs it on 3.5 and 4.0, the lines with adapters of their own: 4.1 and 4.2
run the 4.1 adapter, which the whole suite on 4.3 runs through its kills). `--wheel` adds **wheel_without_jdk**: the
wheel `python -m build` makes, installed with that pyspark in a fresh environment (`.venvs/wheel-<version>`), runs
`statestore demo` (a streaming aggregation, an executor killed, its partitions failed over) with no `javac` or `jar`
on the PATH: "replica" when the demo ends OK with every lost partition loaded from its replica and no jar compiled.

Prints a table, writes `{"lines": {"<pyspark version>": {"operators_equal", "api_equal", "failover_source",
"state_reader", "seconds"}}}` (and "wheel_without_jdk")
and a PNG beside it (seconds per line, coloured by result). Run one line at a time: each starts Spark.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from spark_provider.jar import LINE_RELEASES as LATEST
from spark_provider.spark_lines import ROOT, VENVS, venv_python

FAILOVER_TEST = (
    "tests/test_failover_spark.py::test_q1_aggregation_fails_over_to_replicas_between_batches_and_before_a_commit"
)
CHECKS = {
    "operators_equal": ["tests/test_provider_operators.py"],
    "api_equal": ["tests/test_provider_api.py"],
    "failover_source": [FAILOVER_TEST],
    "state_reader": ["tests/test_state_data_source.py"],
}
QUICK_CHECKS = {
    "operators_equal": ["tests/test_provider_operators.py::test_aggregation_update_mode"],
    "api_equal": ["tests/test_provider_api.py"],
    "failover_source": [FAILOVER_TEST],
}


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def run_check(python: Path, tests: list[str], log: Path) -> bool:
    """Whether `tests` pass under `python`; their output goes to `log`."""
    with log.open("w") as out:
        result = subprocess.run(
            [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], cwd=ROOT, stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    return result.returncode == 0


def run_line(
    version: str, checks: dict[str, list[str]], logs: Path, wheel: bool = False, failover: bool = True
) -> dict[str, Any]:
    """The compatibility subset on pyspark `version` (and, with `wheel`, the demo from the wheel without a JDK;
    without `failover`, not the failover check)."""
    started = time.monotonic()
    python = venv_python(version)
    result: dict[str, Any] = {}
    for name, tests in checks.items():
        if name == "failover_source" and not failover:
            result[name] = "not run"
            _log(f"pyspark {version}: {name}: not run (--failover-lines)")
            continue
        if name == "state_reader" and version.startswith("3."):
            result[name] = "n/a"  # Spark's state data source came with 4.0
            _log(f"pyspark {version}: {name}: n/a (Spark 3.5 has no state data source)")
            continue
        _log(f"pyspark {version}: {name} ...")
        log = logs / f"{version}-{name}.log"
        passed = run_check(python, tests, log)
        if not passed:  # what CI shows of a failure: the end of that check's output
            print("".join(log.read_text().splitlines(keepends=True)[-60:]), flush=True)
        if name == "failover_source":
            result[name] = "replica" if passed else "failed"
        else:
            result[name] = passed
        _log(f"pyspark {version}: {name}: {result[name]}")
    result.setdefault("state_reader", "not run")
    if wheel:
        _log(f"pyspark {version}: wheel_without_jdk ...")
        result["wheel_without_jdk"] = wheel_without_jdk(version, logs)
        _log(f"pyspark {version}: wheel_without_jdk: {result['wheel_without_jdk']}")
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def _path_without_jdk_tools(into: Path) -> str:
    """A directory of links to everything on the PATH but the JDK's development tools: a Java runtime's view."""
    into.mkdir(parents=True, exist_ok=True)
    hidden = {"javac", "jar", "javap", "jlink", "jdeps", "jshell", "jmod", "jarsigner"}
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        for tool in Path(directory).glob("*") if Path(directory).is_dir() else []:
            link = into / tool.name
            if tool.name not in hidden and not link.exists() and not link.is_symlink():
                link.symlink_to(tool)
    return str(into)


def wheel_without_jdk(version: str, logs: Path) -> str:
    """The demo, from the wheel, with that pyspark and no javac: 'replica' when it fails over from replicas."""
    work = VENVS / f"wheel-{version}"
    if work.exists():
        shutil.rmtree(work)
    subprocess.run([sys.executable, "-m", "venv", str(work)], check=True)
    python = work / "bin" / "python"
    dist = work / "dist"
    # setuptools copies the package into build/ and keeps files deleted from the tree since: a wheel built over an
    # old build/ would carry stale Java sources, whose hash no prebuilt jar matches (a fresh clone has none).
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(ROOT)], check=True,
                   capture_output=True)  # fmt: skip
    wheel = next(dist.glob("statestore-*.whl"))
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel), f"pyspark=={version}"], check=True)
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = f"{work / 'bin'}{os.pathsep}{_path_without_jdk_tools(work / 'path')}"
    log = logs / f"{version}-wheel_without_jdk.log"
    with log.open("w") as out:
        done = subprocess.run([str(work / "bin" / "statestore"), "demo", "--workdir", str(work / "demo")],
                              cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=900)  # fmt: skip
    text = log.read_text()
    lost = [line for line in text.splitlines() if line.strip().startswith("partition ") and "loaded version" in line]
    ok = (done.returncode == 0 and "OK: every sensor" in text and "compiling" not in text and lost
          and all("from its replica" in line for line in lost))  # fmt: skip
    return "replica" if ok else "failed"


def passed(result: dict[str, Any]) -> bool:
    """Whether a line passed every check it ran."""
    return (
        result["operators_equal"] is True
        and result["api_equal"] is True
        and result["failover_source"] in ("replica", "not run")
        and result["state_reader"] in (True, "n/a", "not run")
        and result.get("wheel_without_jdk", "not run") in ("replica", "not run")
    )


def print_table(report: dict[str, Any]) -> None:
    """The matrix as a table."""
    print(f"{'pyspark':<10}{'operators':<11}{'api':<7}{'failover':<10}{'state reader':<14}{'wheel, no JDK':<15}"
          f"{'seconds':>8}")  # fmt: skip
    for version, r in report["lines"].items():
        print(
            f"{version:<10}{r['operators_equal']!s:<11}{r['api_equal']!s:<7}{r['failover_source']:<10}"
            f"{r['state_reader']!s:<14}{r.get('wheel_without_jdk', 'not run'):<15}{r['seconds']:>8}"
        )


def write_png(report: dict[str, Any], path: Path) -> None:
    """Seconds per line, green where every check passed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    versions = list(report["lines"])
    seconds = [report["lines"][v]["seconds"] for v in versions]
    colours = ["tab:green" if passed(report["lines"][v]) else "tab:red" for v in versions]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(versions, seconds, color=colours)
    ax.set_xlabel("pyspark")
    ax.set_ylabel("seconds (compatibility subset)")
    ax.set_title("statestore on each Spark line (green: every check passed)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Runs the matrix; exit status 1 if a line failed a check."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller subset (no state data source)")
    parser.add_argument("--wheel", action="store_true", help="also the demo from the built wheel, without javac")
    parser.add_argument("--out", required=True, help="the JSON to write (a PNG is written beside it)")
    parser.add_argument("--lines", nargs="*", default=sorted(LATEST), help="Spark lines (default: all supported)")
    parser.add_argument("--failover-lines", nargs="*", help="run failover_source only on these lines (default: all)")
    args = parser.parse_args(argv)
    failover_lines = args.lines if args.failover_lines is None else args.failover_lines
    unknown = sorted((set(args.lines) | set(failover_lines)) - set(LATEST))
    if unknown:
        parser.error(f"unsupported Spark line(s) {unknown}; supported: {sorted(LATEST)}")
    out = Path(args.out)
    logs = out.with_suffix(".logs")
    logs.mkdir(parents=True, exist_ok=True)
    checks = QUICK_CHECKS if args.quick else CHECKS
    report = {"lines": {LATEST[line]: run_line(LATEST[line], checks, logs, args.wheel, line in failover_lines)
                        for line in args.lines}}
    report["quick"] = args.quick
    report["all_passed"] = all(passed(r) for r in report["lines"].values())
    out.write_text(json.dumps(report, indent=2) + "\n")
    write_png(report, out.with_suffix(".png"))
    print_table(report)
    print(f"logs of each check: {logs}")
    return 0 if report["all_passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
