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
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from statestore.logs import log_event
from statestore.partition_key import partition_key, task_partition_key_of
from statestore.rpc import common_pb2, control_pb2

# Commit times closer than this are a tie (heartbeat transit and clock granularity blur them).
_SAME_COMMIT_SECONDS = 0.05


_log = logging.getLogger("statestore.cluster.membership")
# A heartbeat this much later than the previous one is logged (nodes beat every 0.5 s by default).
_LATE_HEARTBEAT_SECONDS = 1.5
# Entries of the task change log kept for a reader that fell behind (beyond it, the reader re-reads everything).
_TASK_LOG_KEEP = 1 << 16


@dataclass
class Claim:
    """A node's report of a partition it is primary of, with the controller-clock times of its last commit and of
    the heartbeat that brought it."""

    report: control_pb2.PrimaryReport
    committed_at: float
    seen_at: float = 0.0


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
    replica_reports: dict[str, common_pb2.VersionHeld] = field(default_factory=dict)  # key -> store, version, size
    keys_version: int = 0  # bumped whenever the partitions it claims or holds replicas of change
    reports_epoch: int = 0  # under which its last full reports are kept (HeartbeatRequest.reports_epoch)
    rocksdb_memory_bytes: int = 0  # as its last heartbeat reported
    open_files: int = 0
    opens_ahead: bool = False  # its executor opens copies of incoming partitions ahead of their moves
    opened_ahead: dict[str, int] = field(default_factory=dict)  # partition key -> version of the copy opened ahead
    generation: int = 0  # bumped when the node comes back at another address: a restarted process, state gone


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

    A heartbeat costs O(the partitions that node reports): claims, replica holders and the partitions of each task
    and of each primary node are indexed as heartbeats arrive, and a partition's winner is decided again only when
    one of its claimants reports it for the first time, stops reporting it, contests it or changes liveness. A
    partition's record is read from its winner's latest claim when asked for. `changes` counts what placement
    depends on (a partition appearing or forgotten, a primary changing node, a node joining, dying or moving), so
    that a caller can tell in O(1) that nothing it planned from has changed.
    """

    def __init__(
        self, dead_after: float, clock: Callable[[], float] = time.monotonic, forget_after: float = 60.0
    ) -> None:
        self.dead_after = dead_after
        self.false_deaths = 0  # nodes declared dead by silence that came back at the same address
        self.forget_after = forget_after
        self.changes = 0
        self.node_changes = 0  # of those, the ones about nodes: a node joining, moving, dying or coming back
        # Counters for the metrics endpoint (statestore.controller.metrics): loads by where their state came
        # from, as primaries report them, and the bytes of the increments shipped to replicas.
        self.loads_by_source: dict[str, int] = {}
        self.shipped_bytes = 0
        self._clock = clock
        self._nodes: dict[str, NodeRecord] = {}
        self._winner: dict[str, str] = {}  # partition key -> the live node whose claim stands
        self._last_known: dict[str, PartitionRecord] = {}  # partitions no live node claims, until forgotten
        self._claimants: dict[str, set[str]] = {}  # partition key -> nodes whose last heartbeat claims it
        self._by_primary: dict[str, set[str]] = {}  # node id -> partition keys whose record names it primary
        self._by_task: dict[str, set[str]] = {}  # task partition key -> its partitions' keys
        self._holders: dict[str, set[str]] = {}  # partition key -> nodes reporting a replica of it
        self._order: list[str] | None = None  # partition keys by store id, then checkpoint location
        self._forgotten: dict[str, float] = {}  # partition key -> when it was forgotten
        self._lost: set[str] = set()  # nodes whose Spark executor was removed: dead for good
        self._live: frozenset[str] = frozenset()  # the live nodes as of the last refresh
        # Task partitions whose partitions appeared, were forgotten or changed primary, in order; the entry at
        # index i has position `_task_log_start + i` (`tasks_changed_since`).
        self._task_log: list[str] = []
        self._task_log_start = 0
        self._next_reports_epoch = random.randrange(1, 1 << 48)  # random: a restarted controller knows none
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
                self.node_changes += 1
            else:
                self._note_silence(record, node.address)
                if record.address != node.address:
                    record.generation += 1
                if (record.address, record.rack) != (node.address, node.rack):
                    self.changes += 1
                    self.node_changes += 1
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

    def heartbeat(self, request: control_pb2.HeartbeatRequest) -> int:
        """Record a node's heartbeat (registering it if it is unknown, e.g. after a controller restart). Costs
        O(the partitions it reports), O(1) for one that says its reports are unchanged (`reports_epoch`). Returns
        the epoch under which the node's reports are kept (0: the node must send them in full next)."""
        self.register(request.node)
        now = self._clock()
        node_id = request.node.node_id
        with self._lock:
            record = self._nodes.get(node_id)
            if record is None or node_id in self._lost:
                return 0
            record.opens_ahead = request.opens_ahead
            record.opened_ahead = {partition_key(h.store): h.version for h in request.opened_ahead}
            record.rocksdb_memory_bytes = request.rocksdb_memory_bytes
            record.open_files = request.open_files
            if request.reports_epoch:
                return record.reports_epoch if request.reports_epoch == record.reports_epoch else 0
            claims = {}
            for report in request.primaries:
                store = report.store
                key = f"{store.store_id}@{store.checkpoint_dir}"
                claims[key] = Claim(report, now - max(report.seconds_since_commit, 0.0), now)
                self._count(record.primaries.get(key), report)
            before, record.primaries = record.primaries, claims
            if claims.keys() != before.keys():
                record.keys_version += 1
                for key in before.keys() - claims.keys():
                    if self._winner.get(key) == node_id:  # its last record, before the claim is gone
                        self._last_known[key] = _record(node_id, before[key], now)
                    self._claimants[key].discard(node_id)
                    self._settle(key)
            for key in claims:
                claimants = self._claimants.get(key)
                if claimants is None:
                    self._claimants[key] = {node_id}
                    self._settle(key)
                elif len(claimants) > 1 or self._winner.get(key) != node_id:
                    claimants.add(node_id)
                    self._settle(key)  # contested, or new to this node: the freshest claim wins
            reports = {}
            for held in request.replicas_held:
                store = held.store
                reports[f"{store.store_id}@{store.checkpoint_dir}"] = held
            self._set_replicas(record, reports)
            record.reports_epoch = self._next_reports_epoch
            self._next_reports_epoch += 1
            return record.reports_epoch

    def _count(self, before: Claim | None, report: control_pb2.PrimaryReport) -> None:
        """Count a load the report shows for the first time, and the increments shipped since the node's last
        report of the partition (estimated from the last one's size when several versions passed)."""
        load = report.last_load
        if report.HasField("last_load") and (
            before is None
            or not before.report.HasField("last_load")
            or (before.report.last_load.version, before.report.last_load.source, before.report.last_load.millis)
            != (load.version, load.source, load.millis)
        ):
            self.loads_by_source[load.source] = self.loads_by_source.get(load.source, 0) + 1
        if before is not None and report.version > before.report.version:
            versions = report.version - before.report.version
            self.shipped_bytes += report.increment_bytes * versions * len(report.replicas)

    def _set_replicas(self, record: NodeRecord, reports: dict[str, common_pb2.VersionHeld]) -> None:
        """`record`'s replicas are `reports` from now on, indexed by holder (call with the lock held)."""
        old = record.replica_reports
        if reports.keys() != old.keys():
            record.keys_version += 1
            for key in old.keys() - reports.keys():
                holders = self._holders.get(key)
                if holders is not None:
                    holders.discard(record.node_id)
                    if not holders:
                        del self._holders[key]
            for key in reports.keys() - old.keys():
                self._holders.setdefault(key, set()).add(record.node_id)
        record.replica_reports = reports
        record.replicas_held = {key: held.version for key, held in reports.items()}

    def _primary_of(self, key: str) -> str | None:
        """The primary partition `key`'s record names (lock held): its winner, else its last one known."""
        winner = self._winner.get(key)
        if winner is not None:
            return winner
        last = self._last_known.get(key)
        return last.primary if last is not None else None

    def _settle(self, key: str) -> None:
        """Decide partition `key`'s winner among its live claimants (call with the lock held): the freshest claim
        wins; with none, its last record stands until it is forgotten."""
        best: tuple[str, Claim] | None = None
        for node_id in sorted(self._claimants.get(key, ())):
            if node_id not in self._live:
                continue
            claim = self._nodes[node_id].primaries[key]
            if best is None or _fresher(claim, best[1]):
                best = (node_id, claim)
        old = self._primary_of(key)
        if best is None:
            winner = self._winner.pop(key, None)
            claim = self._nodes[winner].primaries.get(key) if winner in self._nodes else None
            if claim is not None:  # a winner that died: its last claim is the record, claimed until it fell silent
                self._last_known[key] = _record(winner, claim, self._nodes[winner].last_seen)
            if not self._claimants.get(key):
                self._claimants.pop(key, None)
            return
        node_id = best[0]
        self._winner[key] = node_id
        self._last_known.pop(key, None)
        self._forgotten.pop(key, None)
        if old != node_id:
            self.changes += 1
            self._log_task(task_partition_key_of(key))
            if old is None:
                self._order = None
                self._by_task.setdefault(task_partition_key_of(key), set()).add(key)
            else:
                self._by_primary[old].discard(key)
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
            self.node_changes += 1
            for node_id in flipped:
                record = self._nodes.get(node_id)
                for key in list(record.primaries) if record is not None else ():
                    self._settle(key)
        if self._last_known:
            for key in [k for k, r in self._last_known.items() if now - r.claimed_at > self.forget_after]:
                self._forget(key, now)
        if self._forgotten:
            for key in [k for k, at in self._forgotten.items() if now - at > 10 * self.forget_after]:
                del self._forgotten[key]  # its replicas were retired long ago: bound the memory

    def _drop_node(self, node_id: str) -> None:
        """Remove a long-dead node's record and its index entries (lock held). A node removed by Spark stays
        refused (`_lost`) if it comes back."""
        record = self._nodes.pop(node_id)
        self.node_changes += 1
        for key in record.primaries:
            claimants = self._claimants.get(key)
            if claimants is not None:
                claimants.discard(node_id)
                if not claimants:
                    del self._claimants[key]
        self._set_replicas(record, {})

    def _forget(self, key: str, now: float) -> None:
        """Forget partition `key`: unclaimed for `forget_after` (lock held)."""
        record = self._last_known.pop(key)
        self._forgotten[key] = now
        self._order = None
        self.changes += 1
        self._by_primary.get(record.primary, set()).discard(key)
        task = task_partition_key_of(key)
        self._log_task(task)
        stores = self._by_task.get(task)
        if stores is not None:
            stores.discard(key)
            if not stores:
                del self._by_task[task]

    def _log_task(self, task: str) -> None:
        """Note that task partition `task`'s partitions or primaries changed (lock held); the log keeps the last
        `_TASK_LOG_KEEP` entries at least."""
        self._task_log.append(task)
        if len(self._task_log) > 2 * _TASK_LOG_KEEP:
            del self._task_log[:_TASK_LOG_KEEP]
            self._task_log_start += _TASK_LOG_KEEP

    def tasks_changed_since(self, position: int | None) -> tuple[set[str] | None, int]:
        """The task partitions whose partitions appeared, were forgotten or changed primary since log position
        `position` (None when the log no longer reaches that far back: ask about every task), and the position
        now (`position` None: only that). Liveness is brought up to date first."""
        with self._lock:
            self._refresh()
            end = self._task_log_start + len(self._task_log)
            if position is None:
                return set(), end
            if position < self._task_log_start:
                return None, end
            return set(self._task_log[position - self._task_log_start :]), end

    def _record(self, key: str) -> PartitionRecord | None:
        """Partition `key`'s record (lock held): its winner's latest claim, else the last one known."""
        winner = self._winner.get(key)
        if winner is not None:
            node = self._nodes[winner]
            return _record(winner, node.primaries[key], node.last_seen)
        return self._last_known.get(key)

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
                winner = self._winner.get(key)
                if winner is not None and winner != node_id:
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
                stores = {key: self._record(key).store for key in (*self._winner, *self._last_known)}
                self._order = sorted(stores, key=lambda k: (stores[k].store_id, stores[k].checkpoint_dir))
            return [self._record(key) for key in self._order]  # type: ignore[misc]  # every key has a record

    def partition(self, key: str) -> PartitionRecord | None:
        """The record of partition `key` (None: not known, or forgotten), as of the last heartbeat or query that
        brought liveness up to date (O(1): a heartbeat asks it of each replica its node holds)."""
        with self._lock:
            return self._record(key)

    def primaries_of(self, node_id: str) -> list[PartitionRecord]:
        """The partitions whose primary is `node_id` (its claim stands, or it was the last to claim them)."""
        with self._lock:
            self._refresh()
            return [self._record(key) for key in sorted(self._by_primary.get(node_id, ()))]  # type: ignore[misc]

    def keys_of_task(self, task: str) -> frozenset[str]:
        """The keys of task partition `task`'s store partitions (O(those), no records built)."""
        with self._lock:
            return frozenset(self._by_task.get(task, ()))

    def stores_of_task(self, task: str) -> list[PartitionRecord]:
        """The store partitions of task partition `task` (statestore.partition_key.task_partition_key), by key."""
        with self._lock:
            self._refresh()
            return [self._record(key) for key in sorted(self._by_task.get(task, ()))]  # type: ignore[misc]

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
            return {key: held.store for key, held in record.replica_reports.items()} if record is not None else {}

    def forget_replicas(self, node_id: str, keys: list[str]) -> None:
        """`node_id` was told to delete its replicas of partitions `keys`: stop counting them as held now, not at
        its next heartbeat, so that no decision taken meanwhile (a hand-over's warm-up) relies on a copy that is
        being deleted. The node's next heartbeat is asked for its reports in full: one that did not delete a replica
        (it never got the reply) reports it again, and it counts again."""
        if not keys:
            return
        with self._lock:
            record = self._nodes.get(node_id)
            if record is not None:
                gone = set(keys)
                self._set_replicas(record, {k: h for k, h in record.replica_reports.items() if k not in gone})
                # Its kept reports no longer match what it holds until it deleted them: if the reply telling it so
                # is lost, an unchanged report must not keep them out of sight, so ask for its reports in full.
                record.reports_epoch = 0

    def state_bytes(self, key: str) -> int:
        """The largest size on disk a live node reported for its replica of partition `key` (0 if none did), as
        of the last query that brought liveness up to date (a re-plan asks it of every partition)."""
        with self._lock:
            return max(
                (
                    self._nodes[n].replica_reports[key].size_bytes
                    for n in self._holders.get(key, ())
                    if n in self._live
                ),
                default=0,
            )

    def seconds_since(self, record: NodeRecord) -> float:
        """Seconds since the node's last heartbeat."""
        return self._clock() - record.last_seen


def _record(node_id: str, claim: Claim, claimed_until: float) -> PartitionRecord:
    """The record a claim leaves once no live node claims the partition. `claimed_until`: the controller time of the
    last heartbeat that claimed it. Not the claim's `seen_at`, the last heartbeat that sent its report in full: a node
    whose reports do not change (an idle query) sends them once, and the partition of an idle query was forgotten,
    and its replicas retired, the moment its primary was lost."""
    return PartitionRecord(claim.report.store, node_id, claim.report, claimed_until)


def _fresher(claim: Claim, other: Claim) -> bool:
    """Whether `claim` beats `other`: committed clearly later, or at about the same time at a higher version."""
    if abs(claim.committed_at - other.committed_at) > _SAME_COMMIT_SECONDS:
        return claim.committed_at > other.committed_at
    return claim.report.version > other.report.version
