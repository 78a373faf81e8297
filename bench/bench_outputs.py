"""What every benchmark ends with: its JSON, a PNG beside it and its table, and the `--quick`/`--out` command line
of the benchmarks that run a keyed aggregation on our provider and Spark's side by side."""

from __future__ import annotations

import argparse
import json
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
    our provider and Spark's (`providers`, ours first), report them side by side and write the outputs. `keys`:
    (quick, full) keys of state."""
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
        runs[provider] = run_one(provider, count, work)
    ours, spark = (runs[p] for p in providers)
    write_outputs(report(ours, spark, args.quick), args.out, write_png, print_table)
    return 0
