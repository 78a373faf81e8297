"""A driver process of the fault suite's driver scenario: runs the suite's query under `--root` (started, or
restarted from its checkpoint) until `--files` input files exist and were processed, publishing the missing
ones one at a time, then exits 0. The suite kills the first such driver with SIGKILL and starts a second."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from spark_provider.fault_suite.rig import start_session
from spark_provider.fault_suite.suite_query import SuiteQuery


def main(argv: list[str] | None = None) -> int:
    """Run the query to `--files` files; 1 when it fails or stalls."""
    parser = argparse.ArgumentParser(prog="python -m spark_provider.fault_suite.driver_run")
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--master", required=True)
    parser.add_argument("--files", type=int, required=True)
    args = parser.parse_args(argv)
    args.root.mkdir(parents=True, exist_ok=True)
    spark, _ = start_session(args.master, args.root, args.root / "faults", "statestore-faults-driver")
    query = SuiteQuery(spark, args.root)
    try:
        query.start()
        if not query.wait_processed(240):
            print(f"the restarted query did not catch up: {query.failure() or 'timeout'}", file=sys.stderr)
            return 1
        while query.fed < args.files:
            query.feed(1)
            if not query.wait_processed(240):
                print(f"batch {query.fed - 1} did not end: {query.failure() or 'timeout'}", file=sys.stderr)
                return 1
        return 0
    finally:
        query.stop()
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
