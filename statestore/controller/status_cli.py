"""`statestore status`: ask the controller for the cluster's status and print it as tables."""

from __future__ import annotations

import argparse
import sys


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Register `statestore status`."""
    parser = subparsers.add_parser("status", help="nodes, partitions, replica groups, versions held and lag")
    from statestore.secret_option import add_secret_argument

    parser.add_argument("--controller", required=True, metavar="HOST:PORT")
    add_secret_argument(parser)
    parser.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    import grpc

    from statestore import auth
    from statestore.controller.status import format_status
    from statestore.rpc import control_pb2, control_pb2_grpc
    from statestore.secret_option import secret_from_file

    try:
        auth.remember(args.controller, secret_from_file(args.secret_file))
    except ValueError as exc:
        print(f"statestore status: {exc}", file=sys.stderr)
        return 2
    with auth.channel(args.controller) as channel:
        try:
            reply = control_pb2_grpc.ControlStub(channel).Status(control_pb2.StatusRequest(), timeout=args.timeout)
        except grpc.RpcError as exc:
            print(
                f"statestore status: controller {args.controller} unreachable: {exc.code().name}: {exc.details()}",
                file=sys.stderr,
            )
            return 1
    print(format_status(reply))
    return 0
