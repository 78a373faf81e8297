"""`statestore faults --schedule random` and `--replay`: random schedules on one Spark session, the JSON, a table,
a PNG, and a replay file per failing seed."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from spark_provider.fault_suite.schedule import random_schedule, read_replay, write_replay
from spark_provider.fault_suite.schedule_run import OPERATION_BOUND_SECONDS, ScheduleResult, ScheduleRun, summary
from spark_provider.fault_suite.suite_operators import OPERATORS, available_operators
from spark_provider.local_cluster import executors_of

PARTITIONS = 4  # the suite session's spark.sql.shuffle.partitions


def run_schedules(args: argparse.Namespace) -> int:
    """Run the schedules the arguments ask for; 0 when every one was exact, every failed operation said why,
    no operation was left running and nothing loaded from the checkpoint location after settling."""
    from tqdm import tqdm

    from spark_provider.fault_suite.rig import Rig, start_session

    if args.replay is not None:
        try:
            plans = [read_replay(args.replay)]
        except ValueError as exc:
            print(f"statestore faults: {exc}", file=sys.stderr)
            return 2
    else:
        plans = [
            (seed, random_schedule(seed, args.events, PARTITIONS))
            for seed in range(args.first_seed, args.first_seed + args.seeds)
        ]
    operators = _operators(args.operator)
    if isinstance(operators, str):
        print(f"statestore faults: {operators}", file=sys.stderr)
        return 2
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="statestore-schedules-"))
    work.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.soak if args.soak else None
    print(
        f"statestore faults: random schedules on {args.master}, q={args.replicas}, operators {', '.join(operators)}, "
        f"queries under {work}",
        flush=True,
    )
    # The controller's log is kept beside the queries (a schedule that does not converge copies it to its own).
    os.environ.setdefault("STATESTORE_CONTROLLER_LOG", str(work / "controller.log"))
    faults_file = work / "faults"
    spark, controller = start_session(
        args.master, work, faults_file, "statestore-schedules", replication_factor=args.replicas
    )
    rig = Rig(spark, work, faults_file, controller, q=args.replicas, executors=executors_of(args.master))
    runner = ScheduleRun(rig, work, PARTITIONS, tuple(operators))
    results: list[ScheduleResult] = []
    bar = tqdm(total=None if deadline else len(plans), unit="schedule", desc="schedules", file=sys.stderr)
    try:
        seed = plans[-1][0]
        while plans or (deadline is not None and time.monotonic() < deadline):
            if plans:
                seed, events = plans.pop(0)
            else:
                seed += 1
                events = random_schedule(seed, args.events, PARTITIONS)
            result = runner.run(seed, events)
            results.append(result)
            if not _good(result):
                replay = args.out.with_name(f"{args.out.stem}.seed-{seed}.json")
                write_replay(replay, seed, events)
                tqdm.write(f"seed {seed}: {_verdict(result)}; replay with --replay {replay}", file=sys.stderr)
            bar.set_postfix_str(f"seed {seed}: {_verdict(result)}")
            bar.update(1)
            if deadline is not None and time.monotonic() >= deadline:
                break
    finally:
        bar.close()
        rig.stop()
    report = summary(results)
    report["master"] = args.master
    report["events_per_schedule"] = args.events
    report["replication_factor"] = args.replicas
    report["operators"] = operators
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    png = _plot(report, args.out.with_suffix(".png"))
    print(table(report))
    print(f"wrote {args.out} and {png}")
    return 0 if all(_good(r) for r in results) else 1


def _operators(chosen: str | None) -> list[str] | str:
    """The operators the seeds cycle through (every one this installation can run, or the one chosen), or what is
    wrong with the choice."""
    available = available_operators()
    if chosen is None:
        return available
    if chosen not in OPERATORS:
        return f"--operator {chosen!r} is not one of {', '.join(OPERATORS)}"
    if chosen not in available:
        return f"--operator {chosen} needs pandas, which this installation lacks (pip install pandas)"
    return [chosen]


def _good(result: ScheduleResult) -> bool:
    operations_ok = all(o.state in ("done", "refused") or (o.state == "failed" and o.reason) for o in result.operations)
    in_bound = all(o.seconds <= OPERATION_BOUND_SECONDS for o in result.operations)
    return (
        result.exact and operations_ok and in_bound and result.checkpoint_loads_after_settling == 0 and result.converged
    )


def _verdict(result: ScheduleResult) -> str:
    if not result.exact:
        return "WRONG RESULTS" if not result.detail.strip().startswith(("the batch", "Traceback")) else "run broke"
    problems = []
    if result.checkpoint_loads_after_settling:
        problems.append(f"{result.checkpoint_loads_after_settling} checkpoint load(s) after settling")
    if not result.converged:
        problems.append("groups not back at q caught-up replicas")
    unended = [o for o in result.operations if o.state not in ("done", "failed", "refused")]
    if unended:
        problems.append(f"{len(unended)} operation(s) still {unended[0].state or 'running'}")
    slow = [o for o in result.operations if o.seconds > OPERATION_BOUND_SECONDS]
    if slow:
        problems.append(f"{len(slow)} operation(s) past the {OPERATION_BOUND_SECONDS:g} s bound")
    silent = [o for o in result.operations if o.state == "failed" and not o.reason]
    if silent:
        problems.append(f"{len(silent)} failed operation(s) without a reason")
    return "exact" + (f" but {', '.join(problems)}" if problems else "")


def table(report: dict) -> str:
    """One line per schedule, then the totals."""
    lines = [f"{'seed':>5}  {'operator':22}  {'verdict':60}  {'ops done/failed':>15}  {'loads l/r/p/c':>15}  {'s':>5}"]
    for r in report["results"]:
        ops = r["operations"]
        done = sum(o["state"] == "done" for o in ops)
        failed = sum(o["state"] == "failed" for o in ops)
        loads = "/".join(str(r["loads"][s]) for s in ("local", "replica", "peer", "checkpoint"))
        verdict = "exact" if r["exact"] else "NOT EXACT"
        if r["exact"] and not r["converged"]:
            verdict += ", not converged"
        if r["checkpoint_loads_after_settling"]:
            verdict += f", {r['checkpoint_loads_after_settling']} checkpoint loads after settling"
        ops_text = f"{done}/{failed}"
        lines.append(
            f"{r['seed']:>5}  {r['operator']:22}  {verdict:60}  {ops_text:>15}  {loads:>15}  {r['seconds']:>5.0f}"
        )
    ops = report["operations"]
    lines += [
        "",
        f"{report['exact']}/{report['schedules']} schedules exact; updates lost {report['lost_updates']}, applied "
        f"twice {report['duplicated_updates']}; operations done {ops['done']}, failed {ops['failed']} "
        f"({ops['failed_with_reason']} with a reason), still running {ops['still_running']}, median "
        f"{ops['median_seconds']} s, max {ops['max_seconds']} s ({ops['over_bound']} past the "
        f"{ops['bound_seconds']:g} s bound); loads {report['loads']}; checkpoint loads after "
        f"settling {report['checkpoint_loads_after_settling']}",
    ]
    return "\n".join(lines)


def _plot(report: dict, png: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = report["results"]
    seeds = [str(r["seed"]) for r in results]
    fig, (loads_ax, ops_ax) = plt.subplots(1, 2, figsize=(11, 0.3 * len(results) + 2))
    left = [0] * len(results)
    colours = {"local": "tab:gray", "replica": "tab:green", "peer": "tab:blue", "checkpoint": "tab:red"}
    for source, colour in colours.items():
        values = [r["loads"][source] for r in results]
        loads_ax.barh(seeds, values, left=left, color=colour, label=source)
        left = [a + b for a, b in zip(left, values, strict=True)]
    loads_ax.set_xlabel("loads after warm-up, by source")
    loads_ax.set_ylabel("seed")
    loads_ax.legend(fontsize=7)
    seconds = [o["seconds"] for r in results for o in r["operations"] if o["state"] in ("done", "failed")]
    ops_ax.hist(seconds or [0], bins=20, color="tab:purple")
    ops_ax.set_xlabel("operation duration (s), done or failed")
    fig.suptitle(
        f"statestore faults --schedule random: {report['exact']}/{report['schedules']} exact, "
        f"{report['checkpoint_loads_after_settling']} checkpoint loads after settling"
    )
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png
