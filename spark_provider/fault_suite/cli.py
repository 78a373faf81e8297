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
    faults.add_argument(
        "--schedule",
        choices=("random",),
        help="instead of the matrix: seeded random schedules of operator commands and faults, one query each",
    )
    faults.add_argument("--seeds", type=_positive, default=20, metavar="N", help="schedules to run (default: 20)")
    faults.add_argument("--first-seed", type=int, default=1, metavar="N", help="the first seed (default: 1)")
    faults.add_argument("--events", type=_positive, default=8, metavar="K", help="events per schedule (default: 8)")
    faults.add_argument(
        "--replicas", type=int, choices=(1, 2), default=1, help="with --schedule: the replication factor q"
    )
    faults.add_argument(
        "--replay", type=Path, metavar="FILE", help="run the schedule a failing seed wrote (<out>.seed-N.json)"
    )
    faults.add_argument(
        "--operator",
        metavar="NAME",
        help="with --schedule: run every seed on this operator (aggregation, dropDuplicates, join, "
        "applyInPandasWithState; default: the seeds cycle through them)",
    )
    faults.add_argument(
        "--soak", type=float, metavar="SECONDS", help="with --schedule: run seeds one after another this long"
    )
    faults.set_defaults(handler=_run_faults)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


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
    if args.schedule or args.replay:
        from spark_provider.fault_suite.schedule_cli import run_schedules

        return run_schedules(args)
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
