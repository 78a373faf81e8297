"""`statestore node`: run a state node (settings documented in docs/node.md)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from statestore.logs import configure_logging
from statestore.node.settings import MIB, RACK_ENV, NodeSettings


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Register `statestore node`."""
    parser = subparsers.add_parser("node", help="run a state node (replicas, shipping, catch-up)")
    parser.add_argument("--listen", required=True, metavar="HOST:PORT", help="address of the node's gRPC server")
    parser.add_argument("--data-dir", required=True, type=Path, metavar="DIR", help="where replicas are kept")
    parser.add_argument("--controller", metavar="HOST:PORT", help="the controller's address")
    parser.add_argument("--node-id", default="", help="identity in the membership (default: the advertised address)")
    parser.add_argument(
        "--port-retries",
        type=int,
        default=0,
        metavar="N",
        help="when the --listen port is taken, try the next N ports (as Spark's spark.port.maxRetries)",
    )
    parser.add_argument(
        "--advertise",
        default="",
        metavar="HOST[:PORT]",
        help="address peers use (default: --listen; for a wildcard --listen, --executor-host or this machine's name; "
        "no port or port 0: the bound one)",
    )
    parser.add_argument(
        "--rack",
        default="",
        help="the node's rack, for placement (default: $STATESTORE_NODE_RACK, else the node is its own rack)",
    )
    parser.add_argument(
        "--executor-host",
        default="",
        help="host of the Spark executor whose state this node keeps, as Spark's scheduler names it (a sidecar's "
        "provider passes it; with --node-id set to the executor id, the driver can steer tasks to this node)",
    )
    parser.add_argument("--heartbeat-interval", type=float, default=0.5, metavar="SECONDS")
    parser.add_argument(
        "--max-in-flight-mb", type=float, default=64, help="unacked bytes per replica before ship waits"
    )
    parser.add_argument("--backpressure-timeout", type=float, default=1.0, metavar="SECONDS")
    parser.add_argument("--retry-max-backoff", type=float, default=2.0, metavar="SECONDS")
    parser.add_argument("--sync-timeout", type=float, default=10.0, metavar="SECONDS")
    parser.add_argument("--bootstrap-min-gap", type=int, default=16, metavar="VERSIONS")
    parser.add_argument("--bootstrap-mb-per-second", type=float, default=64)
    parser.add_argument(
        "--memory-budget-mb",
        type=int,
        default=128,
        help="RocksDB memory of all the node's replicas together (block cache and write buffers); 0: unbounded",
    )
    parser.add_argument(
        "--max-open-replicas",
        type=_non_negative_int,
        default=96,
        metavar="N",
        help="replicas whose RocksDB stores stay open at once (about 7 open files each); past it, a replica is "
        "closed after each increment and opened again at its next; 0: all stay open",
    )
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument(
        "--local-socket", type=Path, metavar="PATH", help="serve the provider's local channel on this Unix socket"
    )
    parser.add_argument(
        "--provider-dir",
        type=Path,
        metavar="DIR",
        help="the directory the providers keep their stores beneath (local-channel frames may name paths only "
        "there; default: the parent of --data-dir, as for a sidecar)",
    )
    parser.add_argument(
        "--replica-files-dir",
        type=Path,
        metavar="DIR",
        help="the host's copies directory of Spark's RocksDB provider's state files (docs/formats.md section 7), "
        "where the node keeps the files peers ship it; a sidecar's executor passes it",
    )
    parser.add_argument(
        "--parent-pid", type=int, metavar="PID", help="exit when this process exits (a sidecar of an executor JVM)"
    )
    parser.set_defaults(handler=_run)


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative: give 0 (no bound) or more")
    return value


def _run(args: argparse.Namespace) -> int:
    from statestore.node.server import run_node  # grpc and rocksdict load only for this command
    from statestore.secret_option import secret_from_env

    configure_logging(args.log_level)
    settings = NodeSettings(
        listen=args.listen,
        data_dir=args.data_dir,
        controller=args.controller,
        node_id=args.node_id,
        advertise=args.advertise,
        port_retries=args.port_retries,
        rack=args.rack or os.environ.get(RACK_ENV, ""),
        executor_id=args.node_id if args.executor_host else "",
        executor_host=args.executor_host,
        heartbeat_interval=args.heartbeat_interval,
        max_in_flight_bytes=int(args.max_in_flight_mb * MIB),
        backpressure_timeout=args.backpressure_timeout,
        sync_timeout=args.sync_timeout,
        retry_max_backoff=args.retry_max_backoff,
        bootstrap_min_gap=args.bootstrap_min_gap,
        bootstrap_bytes_per_second=int(args.bootstrap_mb_per_second * MIB),
        memory_budget_mb=args.memory_budget_mb,
        max_open_replicas=args.max_open_replicas,
        provider_dir=args.provider_dir,
        replica_files_dir=args.replica_files_dir,
        secret=secret_from_env(),
    )
    return run_node(settings, args.local_socket, args.parent_pid)
