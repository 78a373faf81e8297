"""The controller's figures in Prometheus' text format, on an HTTP endpoint of its own (off unless a port is given:
`statestore controller --metrics-port`, the `metrics_port` setting). Everything is read at scrape time from what
the controller already keeps (its status, a few counters), so an endpoint nobody scrapes costs nothing.

    statestore_nodes{state}                                       live and dead nodes
    statestore_node_rocksdb_memory_bytes{node}, statestore_node_open_files{node}
    statestore_partition_version{store, checkpoint}               the primary's version
    statestore_replica_lag_versions{store, checkpoint, node}      per replica; also _lag_bytes
    statestore_failovers_total, statestore_failover_partitions_total
    statestore_loads_total{source}                                loads as primaries report them: local, replica,
                                                                  peer, checkpoint
    statestore_shipped_bytes_total                                increments shipped to replicas
    statestore_operation_moves{operation, kind, step}             the moves of the operations listed in status
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric


class ControllerCollector:
    """A Prometheus collector over a running controller (statestore.controller.server.Controller)."""

    def __init__(self, controller: Any) -> None:
        self._controller = controller

    def collect(self) -> Iterator[Metric]:
        """The figures as of now."""
        controller = self._controller
        status = controller.status()
        nodes = GaugeMetricFamily("statestore_nodes", "State nodes the controller knows, by state", labels=["state"])
        alive = sum(1 for n in status.nodes if n.alive)
        nodes.add_metric(["alive"], alive)
        nodes.add_metric(["dead"], len(status.nodes) - alive)
        yield nodes
        memory = GaugeMetricFamily(
            "statestore_node_rocksdb_memory_bytes", "RocksDB memory a node's replicas hold", labels=["node"]
        )
        files = GaugeMetricFamily("statestore_node_open_files", "Files a node holds open", labels=["node"])
        for node in status.nodes:
            memory.add_metric([node.node.node_id], node.rocksdb_memory_bytes)
            files.add_metric([node.node.node_id], node.open_files)
        yield memory
        yield files
        version = GaugeMetricFamily(
            "statestore_partition_version", "The version a partition's primary committed last",
            labels=["store", "checkpoint"],
        )  # fmt: skip
        lag_versions = GaugeMetricFamily(
            "statestore_replica_lag_versions", "Versions a replica is behind its primary",
            labels=["store", "checkpoint", "node"],
        )  # fmt: skip
        lag_bytes = GaugeMetricFamily(
            "statestore_replica_lag_bytes", "Bytes of increments a replica still lacks",
            labels=["store", "checkpoint", "node"],
        )  # fmt: skip
        for partition in status.partitions:
            store = [partition.store.store_id, partition.store.checkpoint_dir]
            version.add_metric(store, partition.primary_version)
            for replica in partition.replicas:
                lag_versions.add_metric([*store, replica.node_id], replica.lag_versions)
                lag_bytes.add_metric([*store, replica.node_id], replica.lag_bytes)
        yield version
        yield lag_versions
        yield lag_bytes
        yield CounterMetricFamily(
            "statestore_failovers", "Executors lost whose partitions were failed over", value=controller.failovers
        )
        yield CounterMetricFamily(
            "statestore_failover_partitions",
            "Partitions failovers steered to their replica holders",
            value=controller.failed_over_partitions,
        )
        loads = CounterMetricFamily(
            "statestore_loads", "Loads of partitions, by where their state came from", labels=["source"]
        )
        for source, count in sorted(dict(controller.membership.loads_by_source).items()):
            loads.add_metric([source], count)
        yield loads
        yield CounterMetricFamily(
            "statestore_shipped_bytes",
            "Bytes of increments shipped to replicas (estimated from each partition's last increment when several "
            "versions passed between two heartbeats)",
            value=controller.membership.shipped_bytes,
        )
        moves = GaugeMetricFamily(
            "statestore_operation_moves", "Moves of the operations statestore status lists, by step",
            labels=["operation", "kind", "step"],
        )  # fmt: skip
        for operation in status.operations:
            for step, count in sorted(Counter(m.step for m in operation.moves).items()):
                moves.add_metric([str(operation.operation_id), operation.kind, step], count)
        yield moves


def serve_metrics(controller: Any, host: str, port: int) -> int:
    """Serve the controller's figures at http://host:port/metrics (port 0: a free one) on a daemon thread; returns
    the bound port."""
    registry = CollectorRegistry()
    registry.register(ControllerCollector(controller))
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return int(server.server_address[1])
