"""`statestore controller`: run the controller as a process (settings in docs/node.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from statestore.logs import configure_logging


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Register `statestore controller`."""
    parser = subparsers.add_parser("controller", help="run the controller (membership, replica groups, status)")
    parser.add_argument("--listen", required=True, metavar="HOST:PORT")
    parser.add_argument("--replication-factor", "-q", type=int, default=1, help="replicas per partition (default 1)")
    parser.add_argument(
        "--dead-after", type=float, default=3.0, metavar="SECONDS", help="silence before a node is dead"
    )
    parser.add_argument("--heartbeat-interval", type=float, default=0.5, metavar="SECONDS")
    parser.add_argument(
        "--forget-after",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="a partition no node claims any more is forgotten (and its replicas deleted) after this long",
    )
    parser.add_argument(
        "--rereplication-delay",
        type=float,
        default=None,
        metavar="SECONDS",
        help="after a node is lost, wait this long before placing new replicas for its roles (default 10)",
    )
    parser.add_argument(
        "--load-balancing",
        choices=("off", "dry-run", "on"),
        default="off",
        help="hand primaries over when one executor stays busier than the others: on, dry-run (only report the "
        "moves in statestore status), off (default)",
    )
    parser.add_argument(
        "--load-balancing-factor",
        type=float,
        default=1.5,
        metavar="X",
        help="an executor's task time per core over this many times the mean counts as imbalance (default 1.5)",
    )
    parser.add_argument(
        "--load-balancing-batches",
        type=int,
        default=5,
        metavar="N",
        help="micro-batches in a row over the factor before acting (default 5)",
    )
    parser.add_argument(
        "--load-balancing-max-moves",
        type=int,
        default=2,
        metavar="N",
        help="hand-overs per automatic operation (default 2)",
    )
    parser.add_argument(
        "--parent-pid", type=int, metavar="PID", help="exit when this process exits (a sidecar of the driver's JVM)"
    )
    parser.add_argument("--port-file", type=Path, metavar="FILE", help="write the bound port here once serving")
    parser.add_argument(
        "--driver-link",
        type=Path,
        metavar="SOCKET",
        help="serve the driver plugin's link at this Unix socket: Spark's executor events in, steering out",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics at http://LISTEN-HOST:PORT/metrics (0: any free port; default: none)",
    )
    parser.add_argument(
        "--application", default="", metavar="NAME", help="the Spark application's name, in this host's registry"
    )
    parser.add_argument("--log-level", default="INFO")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from statestore.controller.load_balancer import BalancerSettings
    from statestore.controller.server import REREPLICATION_DELAY_SECONDS, Controller, run_controller

    configure_logging(args.log_level)
    delay = REREPLICATION_DELAY_SECONDS if args.rereplication_delay is None else args.rereplication_delay
    try:
        balancing = BalancerSettings(
            mode=args.load_balancing,
            imbalance_factor=args.load_balancing_factor,
            batches=args.load_balancing_batches,
            max_moves=args.load_balancing_max_moves,
        )
    except ValueError as exc:
        print(f"statestore controller: error: {exc}", file=sys.stderr)
        return 2
    return run_controller(
        Controller(
            args.listen,
            args.replication_factor,
            args.dead_after,
            args.heartbeat_interval,
            args.forget_after,
            delay,
            load_balancing=balancing,
        ),
        args.parent_pid,
        args.port_file,
        args.driver_link,
        args.application,
        args.metrics_port,
    )
