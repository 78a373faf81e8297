"""The `statestore` command line: one subcommand per module that owns the job."""

from __future__ import annotations

import argparse
import importlib
import sys

# Each module listed here exposes `add_command(subparsers)`; the subcommand sets `handler(args) -> int`.
COMMAND_MODULES = (
    "spark_provider.demo_command",
    "statestore.engine_demo",
    "statestore.protogen",
    "statestore.node.cli",
    "statestore.controller.cli",
    "statestore.controller.status_cli",
    "statestore.controller.operator_cli",
    "statestore.faults.cli",
    "spark_provider.fault_suite.cli",
    "spark_provider.cli",
    "placement.cli",
)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="statestore",
        description="Replicated, incrementally-checkpointed RocksDB state store for Spark streaming",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_command(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `statestore` console script."""
    args = build_parser().parse_args(argv)
    from statestore.tls import TlsError

    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        return 130
    except TlsError as exc:  # a TLS file given, or registered by a controller, that is missing or unreadable
        print(f"statestore {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
