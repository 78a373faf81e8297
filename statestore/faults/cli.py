"""`statestore proxy`: a fault proxy (statestore.faults.proxy) from the command line, its fault changed by typing
`FAULT [MILLIS_OR_EVERY]` lines on standard input (`delay 200`, `corrupt 5`, `cut`, `pass`). The suite that runs
faults against a Spark query, `statestore faults`, is in spark_provider/fault_suite/."""

from __future__ import annotations

import argparse
import sys


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Register `statestore proxy`."""
    parser = subparsers.add_parser("proxy", help="a TCP proxy that delays, drops, corrupts or cuts traffic")
    parser.add_argument("--listen", default="127.0.0.1:0", metavar="HOST:PORT")
    parser.add_argument("--target", required=True, metavar="HOST:PORT")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from statestore.faults.proxy import FAULTS, FaultProxy
    from statestore.logs import configure_logging

    configure_logging("INFO")
    proxy = FaultProxy(args.target, args.listen)
    print(f"listening on {proxy.start()}; type one of {', '.join(FAULTS)} [millis|every]", flush=True)
    try:
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            number = int(words[1]) if len(words) > 1 else 0
            try:
                if words[0] == "delay":
                    proxy.set("delay", millis=number)
                else:
                    proxy.set(words[0], every=max(number, 1))
            except ValueError as exc:
                print(exc, file=sys.stderr, flush=True)
    finally:
        proxy.stop()
    return 0
