"""`statestore demo`: the project's main job (README's first command).

A real PySpark streaming query (a stateful aggregation over a generated stream) on our provider, on an
embedded local cluster of three executor JVMs with one replica per partition: a few micro-batches, kill -9 of
the busiest executor, where each lost partition's state came from (its replica) and how long that took, more
micro-batches, and a check of the state against a batch recomputation. `statestore engine-demo` runs the
engine alone.
"""

from __future__ import annotations

import argparse


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Register `statestore demo`."""
    from spark_provider import streaming_demo

    parser = subparsers.add_parser(
        "demo",
        help="the main job: a PySpark streaming aggregation on the statestore provider, surviving a killed executor",
    )
    streaming_demo.add_arguments(parser)
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from spark_provider import streaming_demo

    return streaming_demo.run_demo(args)
