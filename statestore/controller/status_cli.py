"""`statestore status`: ask the controller for the cluster's status and print it as tables."""

from __future__ import annotations

import argparse
import sys


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Register `statestore status`."""
    parser = subparsers.add_parser("status", help="nodes, partitions, replica groups, versions held and lag")
    from statestore.controller.target_option import add_target_arguments

    add_target_arguments(parser)
    parser.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    import grpc

    from statestore import auth
    from statestore.controller.status import format_status
    from statestore.controller.target_option import resolve_target
    from statestore.rpc import control_pb2, control_pb2_grpc

    address = resolve_target(args, "status")
    if address is None:
        return 2
    with auth.channel(address) as channel:
        try:
            reply = control_pb2_grpc.ControlStub(channel).Status(control_pb2.StatusRequest(), timeout=args.timeout)
        except grpc.RpcError as exc:
            print(
                f"statestore status: controller {address} unreachable: {exc.code().name}: {exc.details()}",
                file=sys.stderr,
            )
            return 1
    print(format_status(reply))
    return 0
