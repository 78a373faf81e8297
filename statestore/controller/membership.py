"""Membership: which nodes are registered, which are alive, what each last reported, and which node is
each partition's primary.

Partitions are keyed by `statestore.partition_key` (store id and checkpoint location). A partition may be
claimed by two nodes at once: Spark ran its task on another executor (a query restart, a lost executor)
and the old node still reports the last version it shipped. The primary is the claimant that committed
most recently, by each node's own report of how long ago that was (no synchronized clocks needed); a tie
goes to the higher version. The other claimants are told to demote. Claims of dead nodes do not count. A
partition no live node claims keeps its last known record for `forget_after` seconds, so that a primary's
node restarting does not make it vanish from placement; after that (its query stopped, or its primary's
node is gone) it is forgotten, and nodes holding replicas of it are told to drop them. Only partitions
this controller saw and forgot count as forgotten: a replica of a partition it never saw (it restarted)
is kept until that partition shows up or is forgotten in turn.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from statestore.node.logs import log_event
from statestore.partition_key import partition_key, task_partition_key_of
from statestore.rpc import common_pb2, control_pb2

# Commit times closer than this are a tie (heartbeat transit and clock granularity blur them).
_SAME_COMMIT_SECONDS = 0.05


_log = logging.getLogger("statestore.controller.membership")
# A heartbeat this much later than the previous one is logged (nodes beat every 0.5 s by default).
_LATE_HEARTBEAT_SECONDS = 1.5


@dataclass
class Claim:
    """A node's report of a partition it is primary of, with the controller-clock time of its last commit."""

    report: control_pb2.PrimaryReport
    committed_at: float


@dataclass
class NodeRecord:
    """A registered node and its last heartbeat."""

    node_id: str
    address: str
    last_seen: float
    rack: str = ""  # empty: the node is its own rack
    executor_id: str = ""  # the Spark executor whose state the node keeps (empty: not known)
    executor_host: str = ""
    executor_cores: int = 0  # the executor's task slots (0: not known)
    primaries: dict[str, Claim] = field(default_factory=dict)  # partition key -> claim
    replicas_held: dict[str, int] = field(default_factory=dict)  # partition key -> version held
    replica_sizes: dict[str, int] = field(default_factory=dict)  # partition key -> bytes on disk
    replica_refs: dict[str, common_pb2.StoreRef] = field(default_factory=dict)  # partition key -> store
    opens_ahead: bool = False  # its executor opens copies of incoming partitions ahead of their moves
    opened_ahead: dict[str, int] = field(default_factory=dict)  # partition key -> version of the copy opened ahead


@dataclass
class PartitionRecord:
    """A partition as its primary's node last reported it."""

    store: common_pb2.StoreRef
    primary: str
    report: control_pb2.PrimaryReport
    claimed_at: float = 0.0  # controller clock of the last heartbeat that claimed it

    @property
    def key(self) -> str:
        """The partition key (statestore.partition_key)."""
        return partition_key(self.store)


class Membership:
    """Registered nodes and their reports; a node silent for `dead_after` seconds is dead.

    Every question a heartbeat asks costs O(that node's partitions): claims, replica holders, the partitions of
    each task and of each primary node are indexed as heartbeats arrive, and a partition's standing record (its
    winning claim) is settled only when one of its claimants reports or changes liveness. `changes` counts what
    placement depends on (a partition appearing or forgotten, a primary changing node, a node joining, dying or
    moving), so that a caller can tell in O(1) that nothing it planned from has changed.
    """

    def __init__(
        self, dead_after: float, clock: Callable[[], float] = time.monotonic, forget_after: float = 60.0
    ) -> None:
        self.dead_after = dead_after
        self.false_deaths = 0  # nodes declared dead by silence that came back at the same address
        self.forget_after = forget_after
        self.changes = 0
        self._clock = clock
        self._nodes: dict[str, NodeRecord] = {}
        self._records: dict[str, PartitionRecord] = {}  # partition key -> its standing record
        self._claimants: dict[str, set[str]] = {}  # partition key -> nodes whose last heartbeat claims it
        self._unclaimed: set[str] = set()  # partitions with a record and no live claimant (forgotten in time)
        self._by_primary: dict[str, set[str]] = {}  # node id -> partition keys whose record names it primary
        self._by_task: dict[str, set[str]] = {}  # task partition key -> its partitions' keys
        self._holders: dict[str, set[str]] = {}  # partition key -> nodes reporting a replica of it
        self._order: list[str] | None = None  # partition keys by store id, then checkpoint location
        self._forgotten: dict[str, float] = {}  # partition key -> when it was forgotten
        self._lost: set[str] = set()  # nodes whose Spark executor was removed: dead for good
        self._live: frozenset[str] = frozenset()  # the live nodes as of the last refresh
        self._lock = threading.RLock()

    def register(self, node: control_pb2.NodeRef) -> None:
        """A node joins or rejoins (a node whose executor Spark removed stays dead: it may still be winding
        down, and Spark never reuses an executor id)."""
        with self._lock:
            if node.node_id in self._lost:
                return
            record = self._nodes.get(node.node_id)
            if record is None:
                record = self._nodes[node.node_id] = NodeRecord(node.node_id, node.address, self._clock(), node.rack)
                self.changes += 1
            else:
                self._note_silence(record, node.address)
                if (record.address, record.rack) != (node.address, node.rack):
                    self.changes += 1
                record.address = node.address
                record.rack = node.rack
                record.last_seen = self._clock()
            record.executor_id = node.executor_id
            record.executor_host = node.executor_host
            record.executor_cores = node.executor_cores
            self._refresh()

    def _note_silence(self, record: NodeRecord, address: str) -> None:
        """Log a heartbeat that comes late (call with the lock held). Past `dead_after` the node was dead to the
        controller meanwhile: at the same address it is the same process back (a false death, counted in
        `false_deaths`: a pause, a busy machine), at another a restarted node."""
        silent = self._clock() - record.last_seen
        if silent <= _LATE_HEARTBEAT_SECONDS:
            return
        if silent <= self.dead_after:
            log_event(_log, "heartbeat_late", node=record.node_id, silent_seconds=round(silent, 2))
        elif address == record.address:
            self.false_deaths += 1
            log_event(
                _log,
                "node_back",
                logging.WARNING,
                node=record.node_id,
                silent_seconds=round(silent, 2),
                dead_after=self.dead_after,
                false_deaths=self.false_deaths,
            )
        else:
            log_event(_log, "node_restarted", node=record.node_id, silent_seconds=round(silent, 2), address=address)

    def now(self) -> float:
        """The controller's clock (monotonic seconds)."""
        return self._clock()

    def lose(self, node_id: str) -> bool:
        """Spark removed the node's executor: the node is dead from now on, without waiting for missed
        heartbeats. Returns whether the node was known."""
        with self._lock:
            self._lost.add(node_id)
            self._refresh()
            return node_id in self._nodes

    def node_of_executor(self, executor_id: str) -> str | None:
        """The node keeping the state of Spark executor `executor_id` (a sidecar's node id is its executor's)."""
        with self._lock:
            for record in self._nodes.values():
                if record.executor_id == executor_id:
                    return record.node_id
            return executor_id if executor_id in self._nodes else None

    def holders(self, key: str) -> list[tuple[NodeRecord, int]]:
        """The live nodes holding a replica of partition `key`, with the version each holds, freshest first."""
        with self._lock:
            self._refresh()
            found = [
                (self._nodes[n], self._nodes[n].replicas_held[key])
                for n in self._holders.get(key, ())
                if n in self._live
            ]
        return sorted(found, key=lambda pair: (-pair[1], len(pair[0].primaries), pair[0].node_id))

    def heartbeat(self, request: control_pb2.HeartbeatRequest) -> None:
        """Record a node's heartbeat (registering it if it is unknown, e.g. after a controller restart). Costs
        O(the partitions it reports)."""
        self.register(request.node)
        now = self._clock()
        node_id = request.node.node_id
        with self._lock:
            record = self._nodes.get(node_id)
            if record is None or node_id in self._lost:
                return
            before = record.primaries
            record.primaries = {
                partition_key(p.store): Claim(p, now - max(p.seconds_since_commit, 0.0)) for p in request.primaries
            }
            for key in before.keys() - record.primaries.keys():
                self._claimants[key].discard(node_id)
                self._settle(key)
            for key in record.primaries:
                self._claimants.setdefault(key, set()).add(node_id)
                self._settle(key)
            held = {partition_key(h.store): h for h in request.replicas_held}
            self._set_replicas(record, held.keys())
            record.replicas_held = {key: h.version for key, h in held.items()}
            record.replica_sizes = {key: h.size_bytes for key, h in held.items()}
            record.replica_refs = {key: h.store for key, h in held.items()}
            record.opens_ahead = request.opens_ahead
            record.opened_ahead = {partition_key(h.store): h.version for h in request.opened_ahead}

    def _set_replicas(self, record: NodeRecord, keys: Iterable[str]) -> None:
        """Index `record`'s replicas as `keys` from now on (call with the lock held)."""
        keys = set(keys)
        old = record.replicas_held.keys()
        for key in old - keys:
            holders = self._holders.get(key)
            if holders is not None:
                holders.discard(record.node_id)
                if not holders:
                    del self._holders[key]
        for key in keys - old:
            self._holders.setdefault(key, set()).add(record.node_id)

    def _settle(self, key: str) -> None:
        """Decide partition `key`'s standing record from its live claimants (call with the lock held): the
        freshest claim wins; with none, the last record stands until forgotten."""
        best: tuple[str, Claim] | None = None
        for node_id in sorted(self._claimants.get(key, ())):
            if node_id not in self._live:
                continue
            claim = self._nodes[node_id].primaries[key]
            if best is None or _fresher(claim, best[1]):
                best = (node_id, claim)
        old = self._records.get(key)
        if best is None:
            if old is not None:
                self._unclaimed.add(key)
            if not self._claimants.get(key):
                self._claimants.pop(key, None)
            return
        node_id, claim = best
        self._unclaimed.discard(key)
        self._forgotten.pop(key, None)
        self._records[key] = PartitionRecord(claim.report.store, node_id, claim.report, self._clock())
        if old is None or old.primary != node_id:
            self.changes += 1
            if old is None:
                self._order = None
                self._by_task.setdefault(task_partition_key_of(key), set()).add(key)
            else:
                self._by_primary[old.primary].discard(key)
            self._by_primary.setdefault(node_id, set()).add(key)

    def _refresh(self) -> None:
        """Bring what depends on time up to date (call with the lock held): nodes dead for longer than
        `forget_after` pruned, liveness (the claims of a node that died or came back settled again), and
        partitions unclaimed for `forget_after` forgotten. O(nodes) when nothing is due."""
        now = self._clock()
        cutoff = now - self.dead_after - self.forget_after
        for node_id in [n for n, r in self._nodes.items() if r.last_seen < cutoff]:
            self._drop_node(node_id)
        live = frozenset(
            n for n, r in self._nodes.items() if n not in self._lost and now - r.last_seen <= self.dead_after
        )
        if live != self._live:
            flipped = live ^ self._live
            self._live = live
            self.changes += 1
            for node_id in flipped:
                record = self._nodes.get(node_id)
                for key in list(record.primaries) if record is not None else ():
                    self._settle(key)
        for key in [k for k in self._unclaimed if now - self._records[k].claimed_at > self.forget_after]:
            self._forget(key, now)
        for key in [k for k, at in self._forgotten.items() if now - at > 10 * self.forget_after]:
            del self._forgotten[key]  # its replicas were retired long ago: bound the memory

    def _drop_node(self, node_id: str) -> None:
        """Remove a long-dead node's record and its index entries (lock held). A node removed by Spark stays
        refused (`_lost`) if it comes back."""
        record = self._nodes.pop(node_id)
        for key in record.primaries:
            claimants = self._claimants.get(key)
            if claimants is not None:
                claimants.discard(node_id)
                if not claimants:
                    del self._claimants[key]
        self._set_replicas(record, ())

    def _forget(self, key: str, now: float) -> None:
        """Forget partition `key`: unclaimed for `forget_after` (lock held)."""
        record = self._records.pop(key)
        self._unclaimed.discard(key)
        self._forgotten[key] = now
        self._order = None
        self.changes += 1
        self._by_primary.get(record.primary, set()).discard(key)
        task = task_partition_key_of(key)
        stores = self._by_task.get(task)
        if stores is not None:
            stores.discard(key)
            if not stores:
                del self._by_task[task]

    def demoted(self, node_id: str) -> list[common_pb2.VersionHeld]:
        """The partitions `node_id` claims whose primary is another node that committed them more recently,
        with the version `node_id` claims."""
        with self._lock:
            self._refresh()
            record = self._nodes.get(node_id)
            if record is None:
                return []
            stale = []
            for key, claim in record.primaries.items():
                standing = self._records.get(key)
                if standing is not None and standing.primary != node_id and standing.primary in self._live:
                    stale.append(common_pb2.VersionHeld(store=claim.report.store, version=claim.report.version))
            return stale

    def is_alive(self, record: NodeRecord) -> bool:
        """Whether the node heartbeated within `dead_after` (and Spark did not remove its executor)."""
        return record.node_id not in self._lost and self._clock() - record.last_seen <= self.dead_after

    def nodes(self) -> list[NodeRecord]:
        """Every registered node, by id (a node dead for longer than `forget_after` is removed first)."""
        with self._lock:
            self._refresh()
            return sorted(self._nodes.values(), key=lambda r: r.node_id)

    def live_node_ids(self) -> list[str]:
        """Ids of the live nodes, sorted."""
        with self._lock:
            self._refresh()
            return sorted(self._live)

    def node(self, node_id: str) -> NodeRecord | None:
        """The record of `node_id`."""
        with self._lock:
            return self._nodes.get(node_id)

    def partitions(self) -> list[PartitionRecord]:
        """Every partition claimed by a node, or last claimed within `forget_after`, with its primary: the
        freshest claimant, else the last one known; by store id, then checkpoint location."""
        with self._lock:
            self._refresh()
            if self._order is None:
                stores = {key: record.store for key, record in self._records.items()}
                self._order = sorted(stores, key=lambda k: (stores[k].store_id, stores[k].checkpoint_dir))
            return [self._records[key] for key in self._order]

    def partition(self, key: str) -> PartitionRecord | None:
        """The standing record of partition `key` (None: not known, or forgotten), as of the last heartbeat or
        query that brought liveness up to date (O(1): a heartbeat asks it of each replica its node holds)."""
        with self._lock:
            return self._records.get(key)

    def primaries_of(self, node_id: str) -> list[PartitionRecord]:
        """The partitions whose primary is `node_id` (its claim stands, or it was the last to claim them)."""
        with self._lock:
            self._refresh()
            return [self._records[key] for key in sorted(self._by_primary.get(node_id, ()))]

    def stores_of_task(self, task: str) -> list[PartitionRecord]:
        """The store partitions of task partition `task` (statestore.partition_key.task_partition_key), by key."""
        with self._lock:
            self._refresh()
            return [self._records[key] for key in sorted(self._by_task.get(task, ()))]

    def is_forgotten(self, key: str) -> bool:
        """Whether partition `key` was forgotten (unclaimed for `forget_after`) and not claimed since."""
        with self._lock:
            self._refresh()
            return key in self._forgotten

    def claims(self, node_id: str, key: str) -> bool:
        """Whether `node_id` (alive) reports itself primary of partition `key`."""
        with self._lock:
            record = self._nodes.get(node_id)
            return record is not None and self.is_alive(record) and key in record.primaries

    def replicas_of(self, node_id: str) -> dict[str, common_pb2.StoreRef]:
        """Partition key -> store of every replica `node_id` reported holding."""
        with self._lock:
            record = self._nodes.get(node_id)
            return dict(record.replica_refs) if record is not None else {}

    def forget_replicas(self, node_id: str, keys: list[str]) -> None:
        """`node_id` was told to delete its replicas of partitions `keys`: stop counting them as held now, not at
        its next heartbeat, so that no decision taken meanwhile (a hand-over's warm-up) relies on a copy that is
        being deleted. A node that did not delete one reports it again, and it counts again."""
        with self._lock:
            record = self._nodes.get(node_id)
            if record is None:
                return
            self._set_replicas(record, record.replicas_held.keys() - set(keys))
            for key in keys:
                record.replicas_held.pop(key, None)
                record.replica_sizes.pop(key, None)
                record.replica_refs.pop(key, None)

    def state_bytes(self, key: str) -> int:
        """The largest size on disk a node reported for its replica of partition `key` (0 if none did)."""
        with self._lock:
            self._refresh()
            return max(
                (self._nodes[n].replica_sizes.get(key, 0) for n in self._holders.get(key, ()) if n in self._live),
                default=0,
            )

    def seconds_since(self, record: NodeRecord) -> float:
        """Seconds since the node's last heartbeat."""
        return self._clock() - record.last_seen


def _fresher(claim: Claim, other: Claim) -> bool:
    """Whether `claim` beats `other`: committed clearly later, or at about the same time at a higher version."""
    if abs(claim.committed_at - other.committed_at) > _SAME_COMMIT_SECONDS:
        return claim.committed_at > other.committed_at
    return claim.report.version > other.report.version
