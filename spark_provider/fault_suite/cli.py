"""`statestore faults`: the fault-injection suite against a real Spark query (spark_provider.fault_suite.suite)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Register `statestore faults`."""
    faults = subparsers.add_parser(
        "faults",
        help="run the fault-injection suite against a real Spark query",
        description="Kill, pause, fail and delay executors, state nodes and the controller at each protocol "
        "step, disturb the nodes' controller link, corrupt a checkpoint file and kill the driver, each against "
        "a running streaming aggregation whose every batch is compared with an exact recomputation. Exits 1 "
        "if any scenario failed.",
    )
    faults.add_argument("--quick", action="store_true", help="a representative subset (a few minutes)")
    faults.add_argument("--out", type=Path, metavar="FILE.json", help="the JSON (required to run); the PNG goes beside")
    faults.add_argument(
        "--master",
        default="local-cluster[3,1,1024]",
        help="Spark master (default: %(default)s); its executors must run on this machine (they are signalled)",
    )
    faults.add_argument("--only", nargs="*", metavar="SCENARIO", help="run these scenarios only")
    faults.add_argument("--work-dir", type=Path, help="where the queries live (default: a new temporary directory)")
    faults.add_argument("--list", action="store_true", help="list the scenarios and exit")
    faults.set_defaults(handler=_run_faults)


def _run_faults(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from spark_provider.fault_suite import report, scenarios
    from spark_provider.fault_suite.suite import DRIVER_SCENARIO, Suite, as_json

    names = [s.name for s in scenarios.MATRIX] + [DRIVER_SCENARIO]
    if args.list:
        for s in scenarios.MATRIX:
            print(f"{s.name:36} {s.fault:32} {s.where}")
        print(f"{DRIVER_SCENARIO:36} {'kill -9 of the driver':32} driver and controller, query restarted")
        return 0
    if args.out is None:
        print("statestore faults: --out FILE.json is required to run the suite", file=sys.stderr)
        return 2
    chosen = args.only or (list(scenarios.QUICK) if args.quick else names)
    unknown = [n for n in chosen if n not in names]
    if unknown:
        print(f"statestore faults: unknown scenario(s) {unknown}; --list shows them", file=sys.stderr)
        return 2
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="statestore-faults-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"statestore faults: {len(chosen)} scenario(s) on {args.master}, queries under {work}", flush=True)
    bar = tqdm(total=len(chosen), unit="scenario", desc="faults", file=sys.stderr)

    def progress(result: object) -> None:
        bar.set_postfix_str(f"{result.scenario}: {result.outcome}")
        bar.update(1)
        tqdm.write(f"{result.scenario}: {result.outcome} ({result.seconds:.0f} s)", file=sys.stderr)

    suite = Suite(work, args.master, progress)
    try:
        suite.run([scenarios.BY_NAME[n] for n in chosen if n != DRIVER_SCENARIO], DRIVER_SCENARIO in chosen)
    finally:
        bar.close()
    result = as_json(suite.results, args.quick, args.master)
    png = report.write(result, args.out)
    print(report.table(result))
    print(f"wrote {args.out} and {png}")
    return 0 if result["passed"] == result["scenarios"] else 1
