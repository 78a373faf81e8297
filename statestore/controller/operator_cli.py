"""`statestore move`, `statestore drain`, `statestore rebalance`: planned hand-overs from the command line.

Each command starts one operation on the controller and prints its plan; with `--wait` it follows the operation
with a progress bar (one step per move) until it is done, and exits 1 if a move failed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from placement import Strategy
from statestore.rpc import control_pb2

if TYPE_CHECKING:
    from statestore.controller.client import ControlClient

STRATEGIES = [s.value for s in Strategy]


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Register `statestore move`, `drain` and `rebalance`."""
    move = subparsers.add_parser("move", help="hand task partitions over to another executor (one increment each)")
    move.add_argument(
        "partitions", nargs="+", metavar="PARTITION", help="PARTITION, OPERATOR/PARTITION or OPERATOR/PARTITION/STORE"
    )
    move.add_argument("--to", required=True, metavar="EXECUTOR", help="Spark executor id (or state node id)")
    move.add_argument("--query", default="", metavar="CHECKPOINT", help="the query's checkpoint root, if several")
    _common(move)
    move.set_defaults(handler=_run_move)

    drain = subparsers.add_parser("drain", help="move every primary and replica off an executor")
    drain.add_argument("executor", metavar="EXECUTOR")
    _common(drain)
    drain.set_defaults(handler=_run_drain)

    rebalance = subparsers.add_parser("rebalance", help="re-plan primaries and replicas and carry the moves out")
    rebalance.add_argument("--dry-run", action="store_true", help="only print the moves")
    _common(rebalance)
    rebalance.set_defaults(handler=_run_rebalance)


def _common(parser: argparse.ArgumentParser) -> None:
    from statestore.controller.target_option import add_target_arguments

    add_target_arguments(parser)
    parser.add_argument("--strategy", choices=STRATEGIES, default=Strategy.BATCHED.value)
    parser.add_argument("--wait", action="store_true", help="follow the operation with a progress bar until done")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS", help="give up waiting after this")


def _run_move(args: argparse.Namespace) -> int:
    return _run(args, "move", lambda c: c.move(dict.fromkeys(args.partitions, args.to), args.strategy, args.query))


def _run_drain(args: argparse.Namespace) -> int:
    return _run(args, "drain", lambda c: c.drain(args.executor, args.strategy))


def _run_rebalance(args: argparse.Namespace) -> int:
    return _run(args, "rebalance", lambda c: c.rebalance(args.strategy, args.dry_run))


def _run(args: argparse.Namespace, name: str, start: Callable[[ControlClient], control_pb2.OperationStatus]) -> int:
    from statestore.controller.client import ControlClient, ControlError, in_flight
    from statestore.controller.target_option import resolve_target

    address = resolve_target(args, name)
    if address is None:
        return 2
    with ControlClient(address) as client:
        try:
            status = start(client)
            print(format_operation(status))
            if args.wait and in_flight(status):
                status = _follow(client, status, args.timeout)
                print(format_operation(status))
        except (ControlError, TimeoutError) as exc:
            print(f"statestore {name}: {exc}", file=sys.stderr)
            return 1
    return 1 if status.state in ("failed", "stopped") else 0


def _follow(
    client: ControlClient, status: control_pb2.OperationStatus, timeout: float | None
) -> control_pb2.OperationStatus:
    from tqdm import tqdm

    from statestore.controller.client import moves_done

    with tqdm(total=len(status.moves), unit="move", desc=f"{status.kind} ({status.strategy})", file=sys.stderr) as bar:

        def show(now: control_pb2.OperationStatus) -> None:
            bar.total = len(now.moves)  # a queued command's moves are known once it starts
            bar.n = moves_done(now)
            bar.set_postfix_str(f"batch {now.batch + 1}/{now.batches}", refresh=False)
            bar.refresh()

        return client.wait(status.operation_id, timeout, show)


def format_operation(status: control_pb2.OperationStatus) -> str:
    """An operation as a header line, its notes, and one row per move."""
    lines = [
        f"operation {status.operation_id}: {status.kind} ({status.strategy}), {status.state}, "
        f"{len(status.moves)} move(s) in {status.batches} batch(es), {status.seconds:.1f}s"
        + (f": {status.error}" if status.error else "")
    ]
    lines += [f"  note: {note}" for note in status.notes]
    for move in status.moves:
        what = (
            f"{move.source_node} -> {move.target_node} (executor {move.target_executor})"
            if move.source_node != move.target_node
            else f"replicas of {move.source_node}"
        )
        loaded = (
            f", loaded v{move.effective_version} from {move.load_source} v{move.loaded_from_version} "
            f"in {move.load_millis} ms"
            if move.load_source
            else ""
        )
        after = f", old primary's copy: {move.source_after}" if move.source_after else ""
        error = f": {move.error}" if move.error else (f", waiting for {move.waiting_for}" if move.waiting_for else "")
        lines.append(
            f"  [{move.batch}] {move.partition}: {what}, group {'/'.join(move.final_group)}: {move.step}"
            f"{loaded}{after}{error}"
        )
    return "\n".join(lines)
