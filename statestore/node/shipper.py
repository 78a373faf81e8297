"""The shipper: a primary's node streams every committed increment to its partition's replica group.

One ReplicaLink per replica node carries the increments of every partition that node replicates, in
version order per partition, over one bidirectional Ship stream whose acks report the version held.
In-flight (unacked) bytes per link are bounded: `ship` waits for room (back-pressure) and, past a
timeout, drops that link's backlog; the replica then catches up by pulling. Broken streams are retried
with exponential backoff, re-sending what was not acked.

History rewrites (docs/formats.md section 5): when the primary commits a version v again after a
rollback (flagged by the provider, or detected here: v not after the last version shipped, or bytes
differing from the ones logged for v), the increment log forgets the abandoned versions, every link
drops its queued ones and marks the partition's shipments `rewrites_history` until a replica answered
one of them, so the flag survives dropped backlogs and broken streams. Acks of requests sent before the
rewrite are not trusted for that partition (they may report a version of the abandoned history).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import grpc

from statestore import auth
from statestore.checkpoint_location import CheckpointLocation
from statestore.errors import CorruptFileError
from statestore.faults.points import fault_point
from statestore.increment import verify_increment
from statestore.logs import log_event
from statestore.node.increment_log import IncrementLog, increment_checksum
from statestore.node.settings import GRPC_MESSAGE_OPTIONS, NodeSettings
from statestore.partition_key import partition_key
from statestore.rpc import common_pb2, control_pb2, replication_pb2, replication_pb2_grpc

_log = logging.getLogger("statestore.node.shipper")
# Most increment files a lag computation stats in the checkpoint location (beyond it, lag bytes are a lower
# bound).
_LAG_STAT_LIMIT = 1024
# Times a shipment answered ACK_FAILED is sent again (a heartbeat interval apart) before the replica is left
# to pull it; the partition's newest shipment goes on being sent, _SLOW_RETRY_HEARTBEATS heartbeat intervals apart:
# a replica learns of a gap only from a later increment, and an idle partition ships none. (Seen: a node demoted
# from a partition refuses it until Spark's maintenance closes the store there, a minute or more, then adopts that
# store one version behind; with the newest shipment dropped it stayed behind until the partition's next commit.)
_FAILED_RETRIES = 20
_SLOW_RETRY_HEARTBEATS = 10
# Of the slow retries, every this many is logged (with the first one).
_SLOW_RETRIES_LOGGED_EVERY = 12
# Acks that confirm a replica handled a shipment flagged `rewrites_history`.
_HANDLED = (replication_pb2.ACK_APPLIED, replication_pb2.ACK_DUPLICATE, replication_pb2.ACK_BUFFERED)


@dataclass
class _Shipment:
    store: common_pb2.StoreRef
    version: int
    data: bytes

    @property
    def key(self) -> str:
        return partition_key(self.store)


def _member(node: control_pb2.NodeRef) -> tuple[str, str]:
    """A replica group member as a link knows it: its id and the address it is reached at."""
    return node.node_id, node.address


class WrongPeerError(Exception):
    """An ack came from another node than the link's replica (another process took its address)."""


@dataclass
class _Sent:
    """A request on the current stream, waiting for its ack (one per request; in order within a partition, not
    across partitions: the replica's node handles a link's partitions side by side)."""

    key: str  # partition key (statestore.partition_key)
    version: int
    flagged: bool
    stale: bool = False  # sent before a rewrite of its partition: its ack may describe abandoned history


class ReplicaLink:
    """The stream from this node to one replica node, with its per-partition acked versions."""

    def __init__(self, node_id: str, address: str, settings: NodeSettings, cond: threading.Condition) -> None:
        self.node_id = node_id
        self.address = address
        self._settings = settings
        self._cond = cond  # shared with the Shipper: guards every field below and signals acks
        self._pending: deque[_Shipment] = deque()
        self._unacked: OrderedDict[tuple[str, int], _Shipment] = OrderedDict()  # (partition key, version)
        # Shipments the replica answered ACK_FAILED (e.g. it is the partition's primary until its demotion
        # reaches it): sent again when due, at most _FAILED_RETRIES times; then the replica pulls them.
        self._retry: list[tuple[float, int, _Shipment]] = []  # (due, attempt, shipment)
        self._attempts: dict[tuple[str, int], int] = {}  # failed attempts of the shipments re-sent
        self._acked: dict[str, int] = {}  # partition key -> version acked
        # Per partition, the newest increment a backpressure drop forgot: sent again once the link is idle, as a
        # replica learns of a gap only from a later increment and an idle partition sends none.
        self._nudges: dict[str, _Shipment] = {}
        self._in_flight_bytes = 0
        self._rewrites: dict[str, int] = {}  # partition key -> version rewritten, until a replica handled it
        self._sent: deque[_Sent] = deque()
        self._generation = 0
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"ship-{address}", daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------- called with the shared lock held

    def in_flight_bytes(self) -> int:
        """Bytes enqueued or sent and not yet acked."""
        return self._in_flight_bytes

    def acked(self, key: str) -> int:
        """The version of partition `key` this replica last acked (0 if none)."""
        return self._acked.get(key, 0)

    def enqueue(self, shipment: _Shipment) -> None:
        """Queue an increment for this replica."""
        self._pending.append(shipment)
        self._nudges.pop(shipment.key, None)  # this one shows the replica any gap before it
        self._in_flight_bytes += len(shipment.data)
        self._cond.notify_all()

    def forget(self, key: str) -> None:
        """Forget everything about partition `key` (this node stopped being its primary): its backlog, its
        acked version and rewrite flag, and the acks still due for it."""
        self.drop_backlog(key)
        self._nudges.pop(key, None)
        self._acked.pop(key, None)
        self._rewrites.pop(key, None)
        for sent in self._sent:
            if sent.key == key:
                sent.stale = True
        self._cond.notify_all()

    def drop_backlog(self, key: str | None = None, nudge: bool = False) -> int:
        """Forget queued and unacked increments (of partition `key`, or all); returns how many.

        `nudge`: send each partition's newest forgotten increment again once the link is idle, so that its
        replica pulls what it lacks even if the partition commits nothing more."""
        if nudge:
            for shipment in [*self._unacked.values(), *self._pending, *(r[2] for r in self._retry)]:
                if key is not None and shipment.key != key:
                    continue
                known = self._nudges.get(shipment.key)
                if known is None or shipment.version > known.version:
                    self._nudges[shipment.key] = shipment
        keep = [s for s in self._pending if key is not None and s.key != key]
        dropped = len(self._pending) - len(keep)
        self._pending = deque(keep)
        self._retry = [r for r in self._retry if key is not None and r[2].key != key]
        for entry in [k for k in self._unacked if key is None or k[0] == key]:
            del self._unacked[entry]
            dropped += 1
        for entry in [k for k in self._attempts if key is None or k[0] == key]:
            del self._attempts[entry]
        self._recount()
        return dropped

    def rewrite(self, key: str, version: int) -> None:
        """History of partition `key` was rewritten from `version` on: forget the abandoned shipments and
        flag the partition's next shipments until the replica handled one."""
        self._pending = deque(s for s in self._pending if s.key != key or s.version < version)
        if key in self._nudges and self._nudges[key].version >= version:
            del self._nudges[key]
        for entry in [k for k in self._attempts if k[0] == key and k[1] >= version]:
            del self._attempts[entry]
        self._retry = [r for r in self._retry if r[2].key != key or r[2].version < version]
        for entry in [k for k in self._unacked if k[0] == key and k[1] >= version]:
            del self._unacked[entry]
        self._recount()
        for sent in self._sent:
            if sent.key == key:
                sent.stale = True
        self._rewrites[key] = min(self._rewrites.get(key, version), version)
        if key in self._acked:
            self._acked[key] = min(self._acked[key], version - 1)
        self._cond.notify_all()

    def _recount(self) -> None:
        self._in_flight_bytes = (
            sum(len(s.data) for s in self._pending)
            + sum(len(s.data) for s in self._unacked.values())
            + sum(len(r[2].data) for r in self._retry)
        )

    # ----------------------------------------------------------------- the stream

    def retire(self) -> None:
        """Tell the link's thread to stop (call with the shared lock held; it exits on its own)."""
        self._closed = True
        self._generation += 1
        self._cond.notify_all()

    def close(self) -> None:
        """Stop the link's thread (within about a backoff step)."""
        with self._cond:
            self.retire()
        self._thread.join(timeout=5)

    def _requests(self, generation: int) -> Iterator[replication_pb2.ShipRequest]:
        while True:
            with self._cond:
                self._requeue_due_retries()
                while not self._pending and generation == self._generation:
                    if self._nudges and not self._unacked:
                        self._send_nudges()
                        break
                    self._cond.wait(self._until_next_retry())
                    self._requeue_due_retries()
                if generation != self._generation:
                    return
                shipment = self._pending.popleft()
                self._unacked[(shipment.key, shipment.version)] = shipment
                flagged = shipment.key in self._rewrites
                self._sent.append(_Sent(shipment.key, shipment.version, flagged))
            yield replication_pb2.ShipRequest(
                increment=common_pb2.IncrementBlob(
                    store=shipment.store,
                    version=shipment.version,
                    base_version=shipment.version - 1,
                    data=shipment.data,
                    rewrites_history=flagged,
                ),
                primary_address=self._settings.address,
            )

    def _send_nudges(self) -> None:
        """Queue the increments a backpressure drop forgot the newest of (lock held; the link is idle)."""
        for shipment in sorted(self._nudges.values(), key=lambda s: s.version):
            self._pending.append(shipment)
            self._in_flight_bytes += len(shipment.data)
        self._nudges.clear()

    def _until_next_retry(self) -> float:
        """Seconds until the earliest failed shipment is due again, at most 0.5 (lock held)."""
        if not self._retry:
            return 0.5
        return min(0.5, max(0.0, min(r[0] for r in self._retry) - time.monotonic()))

    def _requeue_due_retries(self) -> None:
        """Move the failed shipments that are due back to the front of the queue (lock held)."""
        now = time.monotonic()
        due = sorted((r for r in self._retry if r[0] <= now), key=lambda r: r[2].version)
        if due:
            self._retry = [r for r in self._retry if r[0] > now]
            for _, attempt, shipment in reversed(due):
                self._pending.appendleft(shipment)
                self._attempts[(shipment.key, shipment.version)] = attempt

    def _on_ack(self, ack: replication_pb2.ShipAck) -> None:
        if ack.replica_node and ack.replica_node != self.node_id:
            raise WrongPeerError(f"{self.address} answered as node {ack.replica_node!r}, not {self.node_id!r}")
        store_id = ack.held.store.store_id
        key = partition_key(ack.held.store)
        with self._cond:
            held = ack.held.version
            sent = self._answered(key, ack.version)
            failed = self._unacked.pop((key, ack.version), None) if ack.status == replication_pb2.ACK_FAILED else None
            attempt = 0
            if failed is not None:
                attempt = self._attempts.pop((key, ack.version), 0) + 1
                if attempt <= _FAILED_RETRIES:
                    self._retry.append((time.monotonic() + self._settings.heartbeat_interval, attempt, failed))
                elif self._is_newest(failed):
                    wait = _SLOW_RETRY_HEARTBEATS * self._settings.heartbeat_interval
                    self._retry.append((time.monotonic() + wait, attempt, failed))
                else:
                    self._in_flight_bytes -= len(failed.data)
            if sent is None or not sent.stale:
                rewritten_from = self._rewrites.get(key)
                # Only a flagged shipment at or past the rewritten version, taken, says the replica handled the
                # rewrite. Until then what it holds from that version on may be the abandoned history (a flagged
                # rewrite it refused as corrupt, or an older version re-sent flagged after a broken stream).
                handled = (sent is not None and sent.flagged and ack.status in _HANDLED
                           and rewritten_from is not None and sent.version >= rewritten_from)  # fmt: skip
                trusted = held if rewritten_from is None or handled else min(held, rewritten_from - 1)
                self._acked[key] = trusted  # a replica restarted empty may go back: trust its latest word
                for entry in [k for k in self._unacked if k[0] == key and k[1] <= trusted]:
                    self._in_flight_bytes -= len(self._unacked.pop(entry).data)
                    self._attempts.pop(entry, None)
                if handled:
                    self._rewrites.pop(key, None)
            self._cond.notify_all()
        slow = attempt - _FAILED_RETRIES - 1  # 0 for the first slow retry
        if slow > 0 and slow % _SLOW_RETRIES_LOGGED_EVERY:
            return
        if ack.status in (replication_pb2.ACK_REJECTED_CORRUPT, replication_pb2.ACK_FAILED):
            log_event(
                _log,
                "replica_refused",
                logging.WARNING,
                replica=self.node_id,
                store=store_id,
                version=ack.version,
                status=replication_pb2.AckStatus.Name(ack.status),
                held=held,
                detail=ack.detail,
            )

    def _is_newest(self, shipment: _Shipment) -> bool:
        """Whether no later increment of the shipment's partition is queued, in flight or due again (lock held)."""
        key, version = shipment.key, shipment.version
        later = (
            any(s.key == key and s.version > version for s in self._pending)
            or any(k == key and v > version for k, v in self._unacked)
            or any(r[2].key == key and r[2].version > version for r in self._retry)
        )
        return not later

    def _answered(self, key: str, version: int) -> _Sent | None:
        """The request an ack of `version` of partition `key` answers, taken off the stream's list (call with the
        lock held); the oldest request when none matches (a replica that echoes another partition or version)."""
        for index, sent in enumerate(self._sent):
            if sent.key == key and sent.version == version:
                del self._sent[index]
                return sent
        return self._sent.popleft() if self._sent else None

    def _run(self) -> None:
        backoff = self._settings.retry_initial_backoff
        failures = 0
        while True:
            with self._cond:
                if self._closed:
                    return
                # Re-send, in order, whatever the previous stream did not get acked.
                self._pending.extendleft(reversed(list(self._unacked.values())))
                self._unacked.clear()
                self._sent.clear()
                self._generation += 1
                generation = self._generation
            channel = call = None
            try:
                channel = auth.channel(self.address, GRPC_MESSAGE_OPTIONS)
                call = replication_pb2_grpc.ReplicationStub(channel).Ship(self._requests(generation))
                for ack in call:
                    self._on_ack(ack)
                    if failures:
                        log_event(_log, "peer_reachable", replica=self.node_id, peer=self.address, after=failures)
                    failures = 0
                    backoff = self._settings.retry_initial_backoff
            except WrongPeerError as exc:
                # Nothing of this stream is trusted: its requests are sent again, to the right node once the
                # controller names its address (the replica group then moves the link).
                failures += 1
                log_event(_log, "ack_from_wrong_node", logging.WARNING, replica=self.node_id, detail=str(exc))
            except grpc.RpcError as exc:
                failures += 1
                if not self._closed:
                    level = logging.WARNING if failures == 1 else logging.DEBUG
                    log_event(
                        _log,
                        "peer_unreachable",
                        level,
                        replica=self.node_id,
                        peer=self.address,
                        code=exc.code().name,
                        detail=exc.details(),
                        attempt=failures,
                        retry_in=round(backoff, 3),
                    )
            except Exception as exc:  # the link's thread must outlive any one stream (a TLS file unreadable...)
                failures += 1
                log_event(_log, "replica_link_failed", logging.ERROR, replica=self.node_id, peer=self.address,
                          error=repr(exc), retry_in=round(backoff, 3))  # fmt: skip
            finally:
                with self._cond:
                    self._generation += 1
                    self._cond.notify_all()
                if call is not None:
                    call.cancel()
                if channel is not None:
                    channel.close()
            with self._cond:
                if not self._closed:
                    self._cond.wait(backoff)
            backoff = min(backoff * 2, self._settings.retry_max_backoff)


@dataclass(frozen=True)
class LoadNote:
    """How the local provider loaded a partition (a PROMOTE's report), for the controller's status."""

    source: str
    version: int
    from_version: int
    versions_applied: int
    millis: int
    at: float  # time.monotonic() when the node learned of it


@dataclass(frozen=True)
class BatchCost:
    """What one committed batch of a partition cost its executor (a `LOAD` from the local provider)."""

    version: int
    task_millis: int
    rows_written: int
    state_bytes: int


# Batches the load report's means cover.
_COSTS_KEPT = 8


@dataclass
class _PrimaryPartition:
    store: common_pb2.StoreRef
    version: int = 0
    group: list[control_pb2.NodeRef] = field(default_factory=list)
    group_known: bool = False
    last_asked: float = 0.0
    committed_at: float = 0.0  # time.monotonic() of the last ship, or of the promotion
    load: LoadNote | None = None
    place: control_pb2.SparkPlace | None = None
    costs: deque[BatchCost] = field(default_factory=lambda: deque(maxlen=_COSTS_KEPT))


@dataclass(frozen=True)
class ShipOutcome:
    """What `ship` did: the replica group's acked versions and, in sync mode, whether one replica acked."""

    version: int
    acked: dict[str, int]
    synced: bool
    detail: str = ""


class Shipper:
    """Ships the increments of the partitions this node is primary of to their replica groups."""

    def __init__(
        self,
        settings: NodeSettings,
        log: IncrementLog,
        ask_replica_groups: Callable[[bool], None],
        on_primary: Callable[[common_pb2.StoreRef], None] = lambda _store: None,
    ) -> None:
        self._settings = settings
        self._log = log
        self._ask_replica_groups = ask_replica_groups
        self._on_primary = on_primary
        self._cond = threading.Condition()
        self._partitions: dict[str, _PrimaryPartition] = {}
        self._links: dict[str, ReplicaLink] = {}
        self._demoted: dict[str, int] = {}  # partition key -> version the controller demoted this node at
        # Partition key -> when the controller demoted this node from it while its local provider still had it
        # open: the provider's store is on its way here (DEMOTE at its close).
        self._awaiting_release: dict[str, float] = {}

    def ship(
        self,
        store: common_pb2.StoreRef,
        data: bytes,
        sync: bool = False,
        sync_timeout: float = 0.0,
        rewrites_history: bool = False,
    ) -> ShipOutcome:
        """Stream a committed increment to every replica of its partition, in version order.

        `rewrites_history`: the primary committed this version after rolling back; replicas holding it or
        later drop that history. A rewrite is also detected without the flag (see the module docstring).
        Raises CorruptFileError if `data` is not a sound increment of `store`.
        """
        # The envelope only (checksum, lineage): the replicas decode the records when they apply them.
        increment = verify_increment(data, f"increment of {store.store_id} handed to ship")
        if increment.store_id != store.store_id:
            raise CorruptFileError(store.store_id, f"increment belongs to store {increment.store_id!r}")
        fault_point("ship", store.store_id)
        version = increment.version
        key = partition_key(store)
        with self._cond:
            demoted_at = self._demoted.get(key)
            if demoted_at is not None and version <= demoted_at and not rewrites_history:
                log_event(
                    _log,
                    "stale_commit_ignored",
                    logging.WARNING,
                    store=store.store_id,
                    version=version,
                    demoted_at=demoted_at,
                    note="another node is the primary; this commit was handed over late",
                )
                return ShipOutcome(
                    version, {}, False, f"not the primary of {store.store_id} since version {demoted_at}"
                )
            partition, became_primary = self._claim(key, store)
            reason = self._rewrite_reason(key, version, partition.version, data, rewrites_history)
            if reason:
                dropped = self._log.drop_after(key, version - 1)
                for link in self._links.values():
                    link.rewrite(key, version)
                log_event(
                    _log,
                    "history_rewritten",
                    logging.WARNING,
                    store=store.store_id,
                    checkpoint=store.checkpoint_dir,
                    version=version,
                    previous=partition.version,
                    reason=reason,
                    dropped_from_log=dropped,
                )
            partition.version = version
            partition.committed_at = time.monotonic()
            # A sync commit must know its group before it ships (else it would return unreplicated), so it asks
            # even when a heartbeat was just requested (promote() asks for one, sent up to 0.1 s later).
            ask = not partition.group_known and (
                sync or time.monotonic() - partition.last_asked > self._settings.heartbeat_interval
            )
            if ask:
                partition.last_asked = time.monotonic()
        if became_primary:
            self._on_primary(partition.store)
        self._log.add(key, version, data)
        if ask:
            # A heartbeat reports this partition and brings back its group: an asynchronous commit does not wait
            # for it (the provider's local channel is answered on this thread); a sync commit, which waits for a
            # replica's ack anyway (on a connection of its own), waits for the heartbeat's answer first.
            self._ask_replica_groups(sync)
        with self._cond:
            links = [self._link(node) for node in partition.group]
            for link in list(links):
                self._wait_for_room(link, len(data), store.store_id)
                # The wait let go of the lock: a demotion, or a group change, may have come meanwhile. A former
                # primary's shipment could take a replica that follows the new primary back.
                if self._partitions.get(key) is not partition:
                    return ShipOutcome(version, {}, not sync, "demoted while waiting for room: not shipped")
                if all(n.node_id != link.node_id for n in partition.group):
                    links.remove(link)
                    continue
                link.enqueue(_Shipment(partition.store, version, data))
            synced = not sync
            if sync and links:
                deadline = time.monotonic() + (sync_timeout or self._settings.sync_timeout)
                while not (synced := any(link.acked(key) >= version for link in links)):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
            acked = {link.node_id: link.acked(key) for link in links}
        detail = "" if links else "no replica group: no live node to replicate to"
        if sync and not synced and links:
            detail = f"no replica acked version {version} within the sync timeout"
        return ShipOutcome(version, acked, synced, detail)

    def promote(
        self,
        store: common_pb2.StoreRef,
        version: int,
        load: LoadNote | None = None,
        place: control_pb2.SparkPlace | None = None,
    ) -> bool:
        """The local provider loaded `version` of the partition to write it: Spark runs its task here now, so
        this node is its primary from now on (it claims the partition as committed now: a node still claiming
        it from before is demoted by the controller). Returns whether the node became primary (False: it was).
        """
        key = partition_key(store)
        with self._cond:
            partition, became_primary = self._claim(key, store)
            # Loaded older than it last shipped (Spark re-runs a batch): the next commit is flagged a rewrite.
            partition.version = version
            partition.committed_at = time.monotonic()
            if load is not None:
                partition.load = load
            if place is not None:
                partition.place = place
            partition.last_asked = time.monotonic()
        if became_primary:
            log_event(
                _log,
                "promoted",
                store=store.store_id,
                checkpoint=store.checkpoint_dir,
                version=version,
                source=load.source if load else "",
            )
            self._on_primary(partition.store)
        self._ask_replica_groups(False)  # the controller re-plans the group around this node now
        return became_primary

    def _claim(self, key: str, store: common_pb2.StoreRef) -> tuple[_PrimaryPartition, bool]:
        """This node is primary of partition `key` from now on (lock held): its record, and whether it is new."""
        self._demoted.pop(key, None)
        self._awaiting_release.pop(key, None)
        partition = self._partitions.get(key)
        if partition is not None:
            return partition, False
        partition = self._partitions[key] = _PrimaryPartition(common_pb2.StoreRef())
        partition.store.CopyFrom(store)
        return partition, True

    def _rewrite_reason(self, key: str, version: int, last: int, data: bytes, flagged: bool) -> str:
        """Why shipping `version` rewrites the partition's history ("" if it does not)."""
        if flagged:
            return "flagged"
        if version <= last:
            return "version_not_after_last_shipped"
        logged = self._log.known(key, version)
        if logged is not None and logged.crc32 != increment_checksum(data):
            return "bytes_differ_from_logged"
        return ""

    def _link(self, node: control_pb2.NodeRef) -> ReplicaLink:
        """The link to replica node `node`, keyed by its id: a node that came back at another address (a
        restart on a new port) gets a new link there, and another process that took its old address is never
        shipped to."""
        link = self._links.get(node.node_id)
        if link is not None and link.address != node.address:
            log_event(_log, "replica_link_moved", replica=node.node_id, old_peer=link.address, peer=node.address)
            self._links.pop(node.node_id).retire()
            link = None
        if link is None:
            link = self._links[node.node_id] = ReplicaLink(node.node_id, node.address, self._settings, self._cond)
        return link

    def _wait_for_room(self, link: ReplicaLink, size: int, store_id: str) -> None:
        deadline = time.monotonic() + self._settings.backpressure_timeout
        while link.in_flight_bytes() and link.in_flight_bytes() + size > self._settings.max_in_flight_bytes:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                dropped = link.drop_backlog(nudge=True)
                log_event(
                    _log,
                    "backpressure_drop",
                    logging.WARNING,
                    replica=link.node_id,
                    store=store_id,
                    dropped_increments=dropped,
                    note="the replica pulls what it lacks; each partition's newest is sent again when the link idles",
                )
                return
            self._cond.wait(remaining)

    def set_replica_groups(self, groups: list[control_pb2.ReplicaGroup]) -> None:
        """Adopt the controller's replica groups; links to nodes that left a group forget its backlog."""
        with self._cond:
            for group in groups:
                key = partition_key(group.store)
                partition = self._partitions.get(key)
                if partition is None:
                    continue
                new = list(group.replicas)
                left = {n.node_id for n in partition.group} - {n.node_id for n in new}
                for node_id in left:
                    if node_id in self._links:
                        # Its nudge too: shipped to a node out of the group, it would make a replica there again.
                        self._links[node_id].forget(key)
                if [_member(n) for n in new] != [_member(n) for n in partition.group]:
                    log_event(
                        _log, "replica_group_changed", store=group.store.store_id, replicas=[n.node_id for n in new]
                    )
                    # A member that joins (or came back at a new address) gets the latest increment now; it pulls
                    # or bootstraps the rest.
                    joined = {_member(n) for n in new} - {_member(n) for n in partition.group}
                    data = self._log.get(key, partition.version)
                    for node in new:
                        if _member(node) in joined and data is not None and partition.version > 0:
                            self._link(node).enqueue(_Shipment(partition.store, partition.version, data))
                partition.group = new
                partition.group_known = True
            self._retire_unwanted_links()

    def demote(self, claims: list[common_pb2.VersionHeld]) -> int:
        """The controller's demotions: stop being primary of each partition another node committed more
        recently, unless this node committed a later version than the one the controller judged (the reply
        crossed a commit). Later commits of that version or older are then ignored unless they rewrite
        history (a late hand-over from the local channel must not win the partition back). Returns how many.
        """
        demoted = 0
        with self._cond:
            for claim in claims:
                key = partition_key(claim.store)
                partition = self._partitions.get(key)
                if partition is None or partition.version > claim.version:
                    continue
                self._demoted[key] = claim.version
                if partition.place is not None and partition.place.run_id:  # a provider here has it open
                    self._awaiting_release[key] = time.monotonic()
                demoted += self._stop_primary(key, "another node committed it more recently")
            self._retire_unwanted_links()
        return demoted

    def release(self, store: common_pb2.StoreRef, adopting: bool = False) -> bool:
        """The local primary unloaded the partition: stop being its primary. Returns whether this node was.
        `adopting`: its directory is being adopted as this node's replica; shipments of the partition wait for
        that (`awaits_local_release`) until `adopted`."""
        key = partition_key(store)
        with self._cond:
            if adopting:
                self._awaiting_release[key] = time.monotonic()
            else:
                self._awaiting_release.pop(key, None)
            released = self._stop_primary(key, "released by the local primary")
            self._retire_unwanted_links()
        return bool(released)

    def adopted(self, store: common_pb2.StoreRef) -> None:
        """The adoption `release(adopting=True)` announced is over (done or refused)."""
        with self._cond:
            self._awaiting_release.pop(partition_key(store), None)

    def awaits_local_release(self, store: common_pb2.StoreRef) -> bool:
        """Whether this node was demoted from the partition while its local provider still has it open, within
        `adopt_wait_seconds`: a replica of it should wait for that provider's store (DEMOTE) rather than be
        bootstrapped."""
        with self._cond:
            since = self._awaiting_release.get(partition_key(store))
            return since is not None and time.monotonic() - since < self._settings.adopt_wait_seconds

    def is_primary(self, store: common_pb2.StoreRef) -> bool:
        """Whether this node is the primary of the partition `store` names."""
        with self._cond:
            return partition_key(store) in self._partitions

    def _stop_primary(self, key: str, why: str) -> int:
        """Forget primary partition `key` and what every link holds of it (call with the lock held); 1 if it
        was one, else 0. The increment log keeps its recent increments for replicas that still pull."""
        partition = self._partitions.pop(key, None)
        if partition is None:
            return 0
        for link in self._links.values():
            link.forget(key)
        self._log.retire(key)
        log_event(
            _log,
            "demoted",
            store=partition.store.store_id,
            checkpoint=partition.store.checkpoint_dir,
            version=partition.version,
            why=why,
        )
        return 1

    def _retire_unwanted_links(self) -> None:
        """Retire the links to nodes in no replica group any more (dead, or moved by placement): not retried
        forever. Call with the lock held."""
        wanted = {n.node_id for p in self._partitions.values() for n in p.group}
        for node_id in [n for n in self._links if n not in wanted]:
            log_event(_log, "replica_link_retired", replica=node_id, peer=self._links[node_id].address)
            self._links.pop(node_id).retire()

    def record_cost(self, store: common_pb2.StoreRef, cost: BatchCost) -> bool:
        """Keep what a committed batch of a partition this node is primary of cost; False when it is not (a late
        report after a demotion)."""
        with self._cond:
            partition = self._partitions.get(partition_key(store))
            if partition is None:
                return False
            partition.costs.append(cost)
            return True

    def reports(self) -> list[control_pb2.PrimaryReport]:
        """Each primary partition's version, how long ago it was committed, and its replicas' acked versions
        and lag in bytes."""
        now = time.monotonic()
        with self._cond:
            reports = []
            for key, partition in self._partitions.items():
                replicas = []
                for node in partition.group:
                    link = self._links.get(node.node_id)
                    acked = link.acked(key) if link and link.address == node.address else 0
                    replicas.append(control_pb2.ReplicaProgress(node_id=node.node_id, acked_version=acked))
                report = control_pb2.PrimaryReport(
                    version=partition.version,
                    replicas=replicas,
                    seconds_since_commit=max(now - partition.committed_at, 0.0),
                    increment_bytes=self._log.mean_size(key),
                )
                report.store.CopyFrom(partition.store)
                if partition.load is not None:
                    load = partition.load
                    report.last_load.CopyFrom(
                        control_pb2.LoadReport(
                            source=load.source,
                            version=load.version,
                            from_version=load.from_version,
                            versions_applied=load.versions_applied,
                            millis=load.millis,
                            seconds_ago=max(now - load.at, 0.0),
                        )
                    )
                if partition.place is not None:
                    report.place.CopyFrom(partition.place)
                if partition.costs:
                    report.load.CopyFrom(_mean_load(partition.costs))
                reports.append(report)
        for report in reports:  # outside the lock: may stat files of the checkpoint location
            for replica in report.replicas:
                replica.lag_bytes = self.lag_bytes(report.store, replica.acked_version, report.version)
        return reports

    def lag_bytes(self, store: common_pb2.StoreRef, acked: int, version: int) -> int:
        """Bytes of increments `acked+1..version`: their sizes as logged (kept for the last few thousand
        versions after their bytes are evicted), else their files' sizes in the checkpoint location.

        Exact when each size is found; otherwise (location unreadable, or more than a thousand versions
        not indexed) the sum of the sizes found, a lower bound.
        """
        total, unknown, _missing = self._log.sizes_between(partition_key(store), acked, version, _LAG_STAT_LIMIT)
        if unknown and store.checkpoint_dir:
            with contextlib.suppress(OSError):  # statestore.checkpoint_fs errors are OSErrors
                total += sum(CheckpointLocation(store.checkpoint_dir, store.store_id).increment_sizes(unknown).values())
        return total

    def close(self) -> None:
        """Stop every link."""
        with self._cond:
            links = list(self._links.values())
            self._links.clear()
        for link in links:
            link.close()


def _mean_load(costs: deque[BatchCost]) -> control_pb2.PartitionLoad:
    n = len(costs)
    return control_pb2.PartitionLoad(
        task_millis=sum(c.task_millis for c in costs) / n,
        rows_written=sum(c.rows_written for c in costs) / n,
        state_bytes=costs[-1].state_bytes,
        batches=n,
    )
