"""Simulated state nodes that drive a real controller over real gRPC: for measuring the controller at sizes this
machine cannot run Spark at (thousands of task partitions over tens of nodes).

Each simulated node heartbeats as a state node does (`statestore.node.membership.Heartbeater`): the partitions it
is primary of, with the versions its replicas acked, and the replicas it holds. Replication is instantaneous: a
node the controller names in a partition's replica group holds that partition at its primary's version from the
next heartbeat on. Nothing here stands in for the controller: it runs as its own process
(`statestore controller`), and its CPU time is read from `/proc`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from statestore import auth
from statestore.partition_key import partition_key
from statestore.rpc import common_pb2, control_pb2, control_pb2_grpc


def store_of(query: int, operator: int, partition: int, root: str = "/simulated") -> common_pb2.StoreRef:
    """A store partition as Spark names it: `<operator>/<partition>/default` under the query's state root."""
    return common_pb2.StoreRef(
        store_id=f"{operator}/{partition}/default",
        checkpoint_dir=f"{root}/query-{query}/state/{operator}/{partition}",
    )


@dataclass
class SimulatedNode:
    """One node: its identity, the partitions it is primary of, and the replicas it holds."""

    node_id: str
    address: str
    primaries: dict[str, common_pb2.StoreRef] = field(default_factory=dict)  # partition key -> store
    replicas: dict[str, tuple[common_pb2.StoreRef, int]] = field(default_factory=dict)  # key -> (store, version)
    groups: dict[str, list[str]] = field(default_factory=dict)  # primary's partition key -> replica node ids
    alive: bool = True

    def request(self, versions: dict[str, int], held: dict[str, dict[str, int]]) -> control_pb2.HeartbeatRequest:
        """The heartbeat this node sends: versions come from the cluster (a partition's latest commit), and each
        replica's acked version from what its holder holds (`held`: node id -> partition key -> version)."""
        primaries = []
        for key, store in self.primaries.items():
            progress = [
                control_pb2.ReplicaProgress(node_id=node, acked_version=held.get(node, {}).get(key, 0))
                for node in self.groups.get(key, [])
            ]
            primaries.append(
                control_pb2.PrimaryReport(
                    store=store,
                    version=versions[key],
                    replicas=progress,
                    seconds_since_commit=0.2,
                    increment_bytes=4096,
                )
            )
        return control_pb2.HeartbeatRequest(
            node=control_pb2.NodeRef(node_id=self.node_id, address=self.address, executor_id=self.node_id),
            primaries=primaries,
            replicas_held=[common_pb2.VersionHeld(store=s, version=v) for s, v in self.replicas.values()],
        )


class SimulatedCluster:
    """`nodes` simulated nodes sharing `queries` x `operators` x `partitions` store partitions, primaries dealt
    round-robin, all talking to the controller at `controller`."""

    def __init__(
        self, controller: str, nodes: int, partitions: int, queries: int = 1, operators: int = 1
    ) -> None:
        self._channel = auth.channel(controller, [("grpc.max_receive_message_length", 256 << 20)])
        self._stub = control_pb2_grpc.ControlStub(self._channel)
        self.nodes = [SimulatedNode(f"sim-{i:03d}", f"127.0.0.1:{20000 + i}") for i in range(nodes)]
        self.versions: dict[str, int] = {}
        self.stores: dict[str, common_pb2.StoreRef] = {}
        index = 0
        for query in range(queries):
            for operator in range(operators):
                for partition in range(partitions):
                    store = store_of(query, operator, partition)
                    key = partition_key(store)
                    self.stores[key] = store
                    self.versions[key] = 1
                    self.nodes[index % nodes].primaries[key] = store
                    index += 1

    @property
    def live(self) -> list[SimulatedNode]:
        """The nodes still heartbeating."""
        return [n for n in self.nodes if n.alive]

    def register_all(self) -> None:
        """Register every node."""
        for node in self.nodes:
            self._stub.Register(
                control_pb2.RegisterRequest(
                    node=control_pb2.NodeRef(node_id=node.node_id, address=node.address, executor_id=node.node_id)
                ),
                timeout=10,
            )

    def _held(self) -> dict[str, dict[str, int]]:
        return {n.node_id: {k: v for k, (_, v) in n.replicas.items()} for n in self.nodes if n.alive}

    def beat(self, node: SimulatedNode, timeout: float = 30.0) -> tuple[float, control_pb2.HeartbeatReply]:
        """One heartbeat of `node`; returns its wall time in seconds and the reply, which the node adopts."""
        request = node.request(self.versions, self._held())
        started = time.perf_counter()
        reply = self._stub.Heartbeat(request, timeout=timeout)
        took = time.perf_counter() - started
        self.adopt(node, reply)
        return took, reply

    def adopt(self, node: SimulatedNode, reply: control_pb2.HeartbeatReply) -> None:
        """What a node does with a reply: adopt its groups (each replica named holds the partition at once), drop
        the retired replicas, stop being primary of what it was demoted from."""
        by_id = {n.node_id: n for n in self.nodes}
        for group in reply.groups:
            key = partition_key(group.store)
            node.groups[key] = [r.node_id for r in group.replicas]
            for replica in group.replicas:
                holder = by_id.get(replica.node_id)
                if holder is not None and holder.alive:
                    holder.replicas[key] = (group.store, self.versions[key])
        for store in reply.retired_replicas:
            node.replicas.pop(partition_key(store), None)
        for held in reply.demoted:
            node.primaries.pop(partition_key(held.store), None)

    def beat_all(self, rounds: int = 1) -> list[float]:
        """`rounds` heartbeats of every live node; their wall times."""
        times = []
        for _ in range(rounds):
            for node in self.live:
                times.append(self.beat(node)[0])
        return times

    def commit_all(self) -> None:
        """Every partition commits a version; replicas follow (instant replication)."""
        for key in self.versions:
            self.versions[key] += 1
        for node in self.live:
            node.replicas = {k: (s, self.versions[k]) for k, (s, _) in node.replicas.items()}

    def kill(self, node: SimulatedNode) -> None:
        """`node` stops heartbeating."""
        node.alive = False

    def fail_over(self, dead: SimulatedNode) -> dict[str, SimulatedNode]:
        """What Spark and the provider do after `dead` is lost: each of its partitions is promoted on a live node
        that holds its replica (else on the live node with the fewest primaries). Returns partition -> new primary."""
        moved = {}
        for key, store in dead.primaries.items():
            holders = [n for n in self.live if key in n.replicas]
            target = holders[0] if holders else min(self.live, key=lambda n: len(n.primaries))
            target.replicas.pop(key, None)
            target.primaries[key] = store
            self.versions[key] += 1
            moved[key] = target
        dead.primaries = {}
        return moved

    def groups_complete(self, replicas: int) -> bool:
        """Whether every partition's primary knows a group of `replicas` live nodes."""
        live = {n.node_id for n in self.live}
        for node in self.live:
            for key in node.primaries:
                group = node.groups.get(key, [])
                if len(group) != replicas or not set(group) <= live:
                    return False
        return True

    def status(self, timeout: float = 60.0) -> tuple[float, control_pb2.StatusReply]:
        """`statestore status`'s call; its wall time and answer."""
        started = time.perf_counter()
        reply = self._stub.Status(control_pb2.StatusRequest(), timeout=timeout)
        return time.perf_counter() - started, reply

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()


def process_cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds process `pid` used so far (from /proc, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_controller_process(
    port: int, replication_factor: int = 1, extra: Iterable[str] = (), log_path: Path | None = None
) -> subprocess.Popen:
    """`statestore controller` on 127.0.0.1:`port` as a process of its own (its log to `log_path`)."""
    out = open(log_path, "ab") if log_path is not None else subprocess.DEVNULL  # noqa: SIM115 (the child keeps it)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "statestore.cli",
            "controller",
            "--listen",
            f"127.0.0.1:{port}",
            "-q",
            str(replication_factor),
            "--log-level",
            "WARNING",
            *extra,
        ],
        stdout=out,
        stderr=subprocess.STDOUT,
    )


def wait_serving(address: str, timeout: float = 30.0) -> None:
    """Wait until the controller at `address` answers a Status call."""
    deadline = time.monotonic() + timeout
    with auth.channel(address) as channel:
        stub = control_pb2_grpc.ControlStub(channel)
        while True:
            try:
                stub.Status(control_pb2.StatusRequest(), timeout=2)
                return
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
