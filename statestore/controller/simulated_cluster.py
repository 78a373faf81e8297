"""Simulated state nodes that drive a real controller over real gRPC: for measuring the controller at sizes this
machine cannot run Spark at (thousands of task partitions over tens of nodes).

Each simulated node heartbeats as a state node does (`statestore.node.membership.Heartbeater`): the partitions it
is primary of, with the versions its replicas acked, and the replicas it holds. Replication is instantaneous: a
node the controller names in a partition's replica group holds that partition at its primary's version from the
next heartbeat on. Nothing here stands in for the controller: it runs as its own process
(`statestore controller`), and its CPU time is read from `/proc`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from statestore import auth
from statestore.node.membership import compact
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
    groups_epoch: int = 0  # of the last reply applied (statestore.controller.sent_groups)
    reports_epoch: int = 0  # under which the controller keeps this node's last reports
    sent_reports: bytes = b""  # their fingerprint (statestore.node.membership.compact)
    pending_reports: bytes | None = None  # the fingerprint of the reports the heartbeat on its way carries
    alive: bool = True
    last_beat: float = 0.0  # monotonic time its last heartbeat began
    beating: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)  # one at a time

    def request(
        self, versions: dict[str, int], held: dict[str, dict[str, int]], since_commit: float = 0.2
    ) -> control_pb2.HeartbeatRequest:
        """The heartbeat this node sends: versions come from the cluster (a partition's latest commit), each
        replica's acked version from what its holder holds (`held`: node id -> partition key -> version), and
        `since_commit` seconds since the last commit (a real node's grows between commits, so no two of its
        heartbeats are the same bytes)."""
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
                    seconds_since_commit=since_commit,
                    increment_bytes=4096,
                )
            )
        request = control_pb2.HeartbeatRequest(
            node=control_pb2.NodeRef(node_id=self.node_id, address=self.address, executor_id=self.node_id),
            primaries=primaries,
            replicas_held=[
                common_pb2.VersionHeld(store=s, version=v, size_bytes=64 << 20) for s, v in self.replicas.values()
            ],
            groups_epoch=self.groups_epoch,
        )
        request, self.pending_reports = compact(request, self.reports_epoch, self.sent_reports)
        return request


class SimulatedCluster:
    """`nodes` simulated nodes sharing `queries` x `operators` x `partitions` store partitions, primaries dealt
    round-robin, all talking to the controller at `controller`."""

    def __init__(
        self, controller: str, nodes: int, partitions: int, queries: int = 1, operators: int = 1
    ) -> None:
        self._channel = auth.channel(controller, [("grpc.max_receive_message_length", 256 << 20)])
        self._stub = control_pb2_grpc.ControlStub(self._channel)
        self.nodes = [SimulatedNode(f"sim-{i:03d}", f"127.0.0.1:{20000 + i}") for i in range(nodes)]
        self._lock = threading.Lock()
        self.versions: dict[str, int] = {}
        self.committed_at = time.monotonic()
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

    def beat(
        self, node: SimulatedNode, timeout: float = 30.0, held: dict[str, dict[str, int]] | None = None
    ) -> tuple[float, control_pb2.HeartbeatReply]:
        """One heartbeat of `node`; returns its wall time in seconds and the reply, which the node adopts."""
        with node.beating:
            return self._beat(node, timeout, held)

    def _beat(
        self, node: SimulatedNode, timeout: float, held: dict[str, dict[str, int]] | None
    ) -> tuple[float, control_pb2.HeartbeatReply]:
        node.last_beat = time.monotonic()
        with self._lock:  # parallel beats: one node's reply gives other nodes replicas (adopt)
            request = node.request(self.versions, held or self._held(), time.monotonic() - self.committed_at)
        started = time.perf_counter()
        reply = self._stub.Heartbeat(request, timeout=timeout)
        took = time.perf_counter() - started
        with self._lock:
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
        node.groups_epoch = reply.groups_epoch
        if reply.reports_epoch and node.pending_reports is not None:
            node.sent_reports = node.pending_reports
        node.reports_epoch = reply.reports_epoch

    @contextlib.contextmanager
    def kept_alive(self, every: float = 1.0) -> Iterator[None]:
        """Meanwhile, a thread beats each live node whose last heartbeat began `every` seconds ago or more and that
        has none on its way. Real nodes beat on timers of their own; a round of `beat_all` is only as fast as the
        controller answers, and on a busy machine one that outlasts the controller's `dead_after` would have it
        declare nodes dead that are not (each coming back re-plans every group), which no real cluster does."""
        stop = threading.Event()

        def beat_the_late() -> None:
            while not stop.wait(every / 4):
                for node in self.live:
                    if time.monotonic() - node.last_beat < every or not node.beating.acquire(blocking=False):
                        continue
                    try:
                        self._beat(node, 30.0, None)
                    except grpc.RpcError:
                        pass  # the next one goes out `every` seconds after this one began
                    finally:
                        node.beating.release()

        thread = threading.Thread(target=beat_the_late, name="simulated-heartbeats", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def beat_all(self, rounds: int = 1, parallel: int = 1) -> list[float]:
        """`rounds` heartbeats of every live node, `parallel` of them at a time (real nodes beat side by side);
        their wall times."""
        times = []
        for _ in range(rounds):
            held = self._held()
            if parallel <= 1:
                times += [self.beat(node, held=held)[0] for node in self.live]
                continue
            with ThreadPoolExecutor(parallel) as pool:
                times += [took for took, _ in pool.map(lambda node, held=held: self.beat(node, held=held), self.live)]
        return times

    def commit_all(self) -> None:
        """Every partition commits a version; replicas follow (instant replication)."""
        for key in self.versions:
            self.versions[key] += 1
        self.committed_at = time.monotonic()
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
        with self._lock:  # a node's groups change as the replies of `kept_alive`'s heartbeats come
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


def free_port() -> int:
    """A port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass(frozen=True)
class ControllerMeasure:
    """What the controller cost at one size, driven by simulated nodes (`measure_controller`)."""

    nodes: int
    partitions: int
    place_all_seconds: float  # from registration until every partition's primary knows its group
    place_all_cpu_seconds: float
    heartbeat_cpu_ms_unchanged: float  # controller CPU per heartbeat whose reports did not change
    heartbeat_cpu_ms_new_versions: float  # ... per heartbeat right after every partition committed
    status_seconds: float  # one `statestore status` call
    loss_replan_seconds: float  # the re-plan that placed a dead node's roles elsewhere
    loss_replan_groups: int
    failover_replan_seconds: float  # the re-plan after its primaries moved to their replica holders
    failover_replan_groups: int

    def to_json(self) -> dict[str, float | int]:
        """The measure as a JSON object."""
        return dict(self.__dict__)


def measure_controller(
    nodes: int,
    partitions: int,
    log_path: Path | None = None,
    rounds: int = 8,
    dead_after: float = 5.0,
    progress: Callable[[str], None] = lambda _line: None,
) -> ControllerMeasure:
    """Run `statestore controller` as a process and drive it with `nodes` simulated nodes holding `partitions`
    task partitions (q=1): how long placing them all takes, the controller's CPU per heartbeat with unchanged
    reports and with new versions (over `rounds` heartbeats of every node), a status call, and the re-plans after
    a node's loss (it stops heartbeating: dead after `dead_after`) and after its primaries fail over."""
    port = free_port()
    controller = start_controller_process(
        port, 1, ["--dead-after", str(dead_after), "--rereplication-delay", "0"], log_path
    )
    address = f"127.0.0.1:{port}"
    cluster = None
    try:
        wait_serving(address)
        cpu = lambda: process_cpu_seconds(controller.pid)  # noqa: E731
        cluster = SimulatedCluster(address, nodes, partitions)
        started, cpu_started = time.perf_counter(), cpu()
        cluster.register_all()
        with cluster.kept_alive():
            while not cluster.groups_complete(1):
                cluster.beat_all(parallel=8)
                if time.perf_counter() - started > 600:
                    raise TimeoutError(f"the controller placed not every group of {partitions} in 600 s")
        place_all = (time.perf_counter() - started, cpu() - cpu_started)
        progress(f"{partitions} partitions over {nodes} nodes placed in {place_all[0]:.2f} s")
        cluster.beat_all()  # every node's reports kept, groups heard
        before, began = cpu(), time.perf_counter()
        beats = len(cluster.beat_all(rounds))
        busy, took = cpu() - before, time.perf_counter() - began
        # What the controller spends with no heartbeat coming (its own timers, the interpreter, gRPC's threads),
        # over a stretch shorter than a node's death, is not the heartbeats' cost: its rate is taken off.
        idle_window = min(took, dead_after / 3)
        before = cpu()
        time.sleep(idle_window)
        idle_rate = (cpu() - before) / idle_window if idle_window > 0 else 0.0
        unchanged = max(busy - idle_rate * took, 0.0) / beats * 1000
        before, beats = cpu(), 0
        for _ in range(rounds):
            cluster.commit_all()
            beats += len(cluster.beat_all())
        new_versions = (cpu() - before) / beats * 1000
        progress(f"heartbeat CPU: {unchanged:.2f} ms unchanged, {new_versions:.2f} ms with new versions")
        status_seconds, status = cluster.status()
        replans = status.placement.replans
        dead = cluster.nodes[0]
        cluster.kill(dead)
        deadline = time.monotonic() + dead_after + 60
        with cluster.kept_alive():
            while status.placement.replans == replans or _alive(status, dead.node_id):
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"the controller did not re-plan around {dead.node_id} within {dead_after + 60} s"
                    )
                cluster.beat_all(parallel=8)
                status = cluster.status()[1]
        loss = (status.placement.last_replan_seconds, status.placement.last_replan_groups)
        progress(f"loss of {dead.node_id}: re-planned {loss[1]} groups in {loss[0]:.3f} s")
        cluster.fail_over(dead)
        replicas = min(1, len(cluster.live) - 1)
        deadline = time.monotonic() + 60
        with cluster.kept_alive():
            while not cluster.groups_complete(replicas):
                if time.monotonic() > deadline:
                    raise TimeoutError("the failed-over partitions did not get their groups within 60 s")
                cluster.beat_all(parallel=8)
        status = cluster.status()[1]
        failover = (status.placement.last_replan_seconds, status.placement.last_replan_groups)
        progress(f"failover: re-planned {failover[1]} groups in {failover[0]:.3f} s")
        return ControllerMeasure(
            nodes, partitions, *place_all, unchanged, new_versions, status_seconds, *loss, *failover
        )
    finally:
        if cluster is not None:
            cluster.close()
        controller.kill()
        controller.wait()


def _alive(status: control_pb2.StatusReply, node_id: str) -> bool:
    return any(n.node.node_id == node_id and n.alive for n in status.nodes)
