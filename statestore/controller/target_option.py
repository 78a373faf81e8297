"""Which controller an operator command calls, and with what secret: `--controller HOST:PORT`, else
`--spark-ui URL` (the application's conf), else the one controller registered on this host
(statestore.registry). The secret: `--secret-file`, else STATESTORE_SECRET, else the registration's."""

from __future__ import annotations

import argparse
import sys


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """`--controller`, `--spark-ui` and `--secret-file` on a command that calls a controller."""
    from statestore.secret_option import add_secret_argument

    parser.add_argument(
        "--controller",
        metavar="HOST:PORT",
        help="the controller to call (default: the application's at --spark-ui, else the one running on this host)",
    )
    parser.add_argument(
        "--spark-ui", metavar="URL", help="the application's Spark UI (http://DRIVER:4040), whose confs name it"
    )
    add_secret_argument(parser)


def resolve_target(args: argparse.Namespace, command: str) -> str | None:
    """The chosen controller's address, its secret remembered for the calls (statestore.auth); None after printing
    to stderr why none could be chosen."""
    from statestore import auth
    from statestore.registry import ControllerNotFound, choose
    from statestore.secret_option import secret_from_env, secret_from_file

    try:
        address, registered_secret = choose(args.controller, args.spark_ui)
        if args.secret_file is not None:
            secret = secret_from_file(args.secret_file)
        else:
            secret = secret_from_env() or registered_secret or ""
    except (ControllerNotFound, ValueError) as exc:
        print(f"statestore {command}: {exc}", file=sys.stderr)
        return None
    auth.remember(address, secret)
    return address
