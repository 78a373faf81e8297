"""What every benchmark ends with: its JSON, a PNG beside it and its table, and the `--quick`/`--out` command line
of the benchmarks that run a keyed aggregation on our provider and Spark's side by side."""

from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def log(message: str) -> None:
    """A progress line, with the time."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def write_outputs(
    result: dict, out: Path, write_png: Callable[[dict, Path], None], print_table: Callable[[dict], None]
) -> None:
    """Write `result` as JSON to `out`, its PNG beside it, and print its table."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    write_png(result, out.with_suffix(".png"))
    print_table(result)
    log(f"wrote {out} and {out.with_suffix('.png')}")


_ISOLATED_RUN = "--isolated-run"


def run_isolated(provider: str, keys: int, work: Path, script: str | None = None) -> Any:
    """The calling benchmark's `run_one(provider, keys, work)` in a driver process of its own (`script`, by default
    the one running, started with `--isolated-run`), its result handed back by pickle. PySpark starts the driver's
    JVM with the first application's confs as system properties, and every later SparkConf in that JVM loads them:
    in one driver process, Spark's provider ran with our plugin, its state nodes and our query listener from the
    application of ours before it."""
    job = work / f"{provider}-{keys}.job.json"
    result = job.with_suffix(".pkl")
    result.unlink(missing_ok=True)
    job.write_text(json.dumps({"run": [provider, keys, str(work)], "result": str(result)}))
    subprocess.run([sys.executable, str(Path(script or sys.argv[0]).resolve()), _ISOLATED_RUN, str(job)], check=True)
    return pickle.loads(result.read_bytes())  # written just now by `_isolated_run` in the child


def _isolated_run(job_file: Path, run_one: Callable[[str, int, Path], Any]) -> int:
    """The child side of `run_isolated`."""
    job = json.loads(job_file.read_text())
    provider, keys, work = job["run"]
    Path(job["result"]).write_bytes(pickle.dumps(run_one(provider, keys, Path(work))))
    return 0


def keyed_providers_main(
    argv: list[str] | None,
    doc: str | None,
    keys: tuple[int, int],
    providers: tuple[str, ...],
    run_one: Callable[[str, int, Path], Any],
    report: Callable[[Any, Any, bool], dict],
    write_png: Callable[[dict, Path], None],
    print_table: Callable[[dict], None],
) -> int:
    """`NAME.py [--quick] --out FILE.json [--keys N] [--workdir DIR]`: run `run_one(provider, keys, workdir)` for
    our provider and Spark's (`providers`, ours first), each in a driver process of its own, report them side by side
    and write the outputs. `keys`:
    (quick, full) keys of state."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [_ISOLATED_RUN]:
        return _isolated_run(Path(argv[1]), run_one)
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"{keys[0]:,} keys (the full run: {keys[1]:,})")
    parser.add_argument("--out", required=True, type=Path, help="the JSON to write (a PNG is written beside it)")
    parser.add_argument("--keys", type=int, default=None, help="keys of state instead of the default")
    parser.add_argument("--workdir", type=Path, default=None, help="where to put checkpoints (default: a temp dir)")
    args = parser.parse_args(argv)
    count = args.keys or (keys[0] if args.quick else keys[1])
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-"))
    runs = {}
    for provider in providers:
        log(f"=== {provider}, {count:,} keys")
        runs[provider] = run_isolated(provider, count, work)
    ours, spark = (runs[p] for p in providers)
    write_outputs(report(ours, spark, args.quick), args.out, write_png, print_table)
    return 0
