"""The node's side of membership: register with the controller, then heartbeat.

Each heartbeat reports the partitions this node is primary of (with its replicas' acked versions and
lag, and how long ago each was committed) and the replicas it holds; the reply brings back the replica
group of each primary partition, the partitions another node committed since (this node is demoted),
and the replicas to delete (their partition was forgotten, or placement gave this node no role in it).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

import grpc

from statestore import auth
from statestore.logs import log_event
from statestore.message_integrity import arrived_intact, checksum_metadata
from statestore.node.settings import NodeSettings
from statestore.partition_key import normalized, partition_key
from statestore.rpc import common_pb2, control_pb2, control_pb2_grpc

_log = logging.getLogger("statestore.node.membership")
# The executor's open-ahead poller asks every 0.2 s (PreparedStores.POLL_MS); silent this long, it is not polling.
_OPENS_AHEAD_SILENCE_SECONDS = 5.0


class Heartbeater:
    """Keeps this node registered and its replica groups current, on a background thread."""

    def __init__(
        self,
        settings: NodeSettings,
        primaries: Callable[[], list[control_pb2.PrimaryReport]],
        replicas_held: Callable[[], list[common_pb2.VersionHeld]],
        on_groups: Callable[[list[control_pb2.ReplicaGroup]], None],
        on_demoted: Callable[[list[common_pb2.VersionHeld]], None] = lambda _claims: None,
        on_retired: Callable[[list[common_pb2.StoreRef]], None] = lambda _stores: None,
    ) -> None:
        self._settings = settings
        self._primaries = primaries
        self._replicas_held = replicas_held
        self._on_groups = on_groups
        self._on_demoted = on_demoted
        self._on_retired = on_retired
        self._node = control_pb2.NodeRef(
            node_id=settings.identity,
            address=settings.address,
            rack=settings.rack,
            executor_id=settings.executor_id,
            executor_host=settings.executor_host,
        )
        self._channel = auth.channel(settings.controller) if settings.controller else None
        self._stub = control_pb2_grpc.ControlStub(self._channel) if self._channel else None
        self._stop = threading.Event()
        self._wake = threading.Event()  # a heartbeat is wanted before the interval ends (request_beat)
        self._groups_epoch = 0  # the groups_epoch of the last reply applied (statestore.controller.sent_groups)
        self._reports_epoch = 0  # under which the controller keeps this node's last reports (0: send them in full)
        self._sent_reports = b""  # those reports, as `_request` compares them
        self._beat_lock = threading.Lock()
        # Guards `_node`, which a provider's LOAD and PROMOTE update on the local channel's thread: never the beat
        # lock, held across the controller's RPCs (2-s deadlines), which that thread must not wait for.
        self._node_lock = threading.Lock()
        self._failures = 0
        self._registered = False
        self._incoming: list[common_pb2.StoreRef] = []
        self._opened_ahead: dict[str, common_pb2.VersionHeld] = {}  # partition key -> the copy's version
        self._incoming_asked_at = float("-inf")
        self._ahead_lock = threading.Lock()  # not the beat lock: a local-channel answer never waits for an RPC
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def start(self) -> None:
        """Register (a failure is logged and retried) and start heartbeating."""
        if self._stub is None:
            log_event(_log, "no_controller", logging.WARNING, note="replica groups stay empty without a controller")
            return
        self._thread.start()

    def set_executor(self, executor_id: str, executor_host: str) -> None:
        """The Spark executor this node serves (a provider's PROMOTE names it), sent from the next heartbeat."""
        with self._node_lock:
            if (self._node.executor_id, self._node.executor_host) != (executor_id, executor_host):
                self._node.executor_id = executor_id
                self._node.executor_host = executor_host
                log_event(_log, "executor_known", executor_id=executor_id, executor_host=executor_host)

    def set_executor_cores(self, cores: int) -> None:
        """The task slots of the executor this node serves (a provider's LOAD names them)."""
        with self._node_lock:
            self._node.executor_cores = cores

    def _node_now(self) -> control_pb2.NodeRef:
        """A copy of this node's description as it is now."""
        with self._node_lock:
            node = control_pb2.NodeRef()
            node.CopyFrom(self._node)
            return node

    def beat(self) -> bool:
        """One heartbeat now (registering first if needed); returns whether the controller answered."""
        if self._stub is None:
            return False
        with self._beat_lock:
            try:
                if not self._registered:
                    self._stub.Register(control_pb2.RegisterRequest(node=self._node_now()), timeout=2.0)
                    self._registered = True
                    log_event(_log, "registered", controller=self._settings.controller, node=self._node.node_id)
                request, reports = self._request()
                reply, call = self._stub.Heartbeat.with_call(request, timeout=2.0, metadata=checksum_metadata(request))
                if not arrived_intact(reply, call.trailing_metadata()):
                    # Believed, a changed byte could demote or retire the wrong partition: wait for the next beat.
                    log_event(
                        _log,
                        "controller_reply_corrupt",
                        logging.WARNING,
                        controller=self._settings.controller,
                        detail="the heartbeat's reply does not match its checksum: ignored",
                    )
                    return False
            except grpc.RpcError as exc:
                self._failures += 1
                if self._failures == 1 or self._failures % 20 == 0:
                    log_event(
                        _log,
                        "controller_unreachable",
                        logging.ERROR,
                        controller=self._settings.controller,
                        code=exc.code().name,
                        detail=exc.details(),
                        attempts=self._failures,
                    )
                return False
            if self._failures:
                log_event(_log, "controller_reachable", controller=self._settings.controller, after=self._failures)
            self._failures = 0
            # Under the lock: replies are handled in the order their requests were built.
            if reply.demoted:
                self._on_demoted(list(reply.demoted))
            if reply.retired_replicas:
                self._on_retired(list(reply.retired_replicas))
            self._on_groups(list(reply.groups))
            self._groups_epoch = reply.groups_epoch
            if reply.reports_epoch and reports is not None:
                self._sent_reports = reports  # the controller keeps these under reply.reports_epoch
            self._reports_epoch = reply.reports_epoch
            self._incoming = [normalized(store) for store in reply.incoming]
            keys = {partition_key(store) for store in self._incoming}
            with self._ahead_lock:
                self._opened_ahead = {k: v for k, v in self._opened_ahead.items() if k in keys}
        return True

    def _request(self) -> tuple[control_pb2.HeartbeatRequest, bytes | None]:
        """The heartbeat to send, and the reports it carries as `reports_fingerprint` bytes (None: it carries
        none, since the controller keeps the same under `reports_epoch`)."""
        request = control_pb2.HeartbeatRequest(
            node=self._node_now(),
            primaries=self._primaries(),
            replicas_held=self._replicas_held(),
            opened_ahead=self._opened_ahead_now(),
            opens_ahead=time.monotonic() - self._incoming_asked_at < _OPENS_AHEAD_SILENCE_SECONDS,
            groups_epoch=self._groups_epoch,
            rocksdb_memory_bytes=shared.usage_bytes() if (shared := self._settings.shared_memory) else 0,
            open_files=_open_files(),
        )
        return compact(request, self._reports_epoch, self._sent_reports)

    @property
    def incoming(self) -> list[common_pb2.StoreRef]:
        """The partitions a running hand-over moves to this node, as of the last heartbeat."""
        return list(self._incoming)

    def note_incoming_asked(self) -> None:
        """The executor asked for the incoming partitions (it opens copies ahead of moves)."""
        self._incoming_asked_at = time.monotonic()

    def note_opened_ahead(self, store: common_pb2.StoreRef, version: int) -> None:
        """A copy of `store` (normalized) at `version` was written for the executor; reported while `store` is
        incoming, so that the controller steers its move once the copy is there."""
        key = partition_key(store)
        if any(partition_key(s) == key for s in self._incoming):
            with self._ahead_lock:
                self._opened_ahead[key] = common_pb2.VersionHeld(store=store, version=version)

    def _opened_ahead_now(self) -> list[common_pb2.VersionHeld]:
        with self._ahead_lock:
            return list(self._opened_ahead.values())

    def request_beat(self) -> None:
        """Ask for a heartbeat now, without waiting for it (a partition promoted here, or shipped without a known
        group): the heartbeat thread sends it. A caller answering the provider's local channel must never wait
        for the controller."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            started = time.monotonic()
            self.beat()
            if self._wake.wait(self._settings.heartbeat_interval):
                # Asked for before the interval ended: not sooner than _REQUESTED_BEAT_GAP_SECONDS after the last
                # beat began, so that a burst of promotions (a partition every few tens of milliseconds while
                # Spark runs a stage's tasks) makes a few heartbeats with all of them, not one each.
                self._stop.wait(max(started + _REQUESTED_BEAT_GAP_SECONDS - time.monotonic(), 0.0))

    def stop(self) -> None:
        """Stop heartbeating."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self._channel is not None:
            self._channel.close()


def reports_fingerprint(request: control_pb2.HeartbeatRequest) -> bytes:
    """A heartbeat's reports (primaries and replicas held) as bytes that stay the same while only the seconds since
    their commits and loads grow."""
    copy = control_pb2.HeartbeatRequest(primaries=request.primaries, replicas_held=request.replicas_held)
    for report in copy.primaries:
        report.seconds_since_commit = 0.0
        if report.HasField("last_load"):
            report.last_load.seconds_ago = 0.0
    return copy.SerializeToString(deterministic=True)


def compact(
    request: control_pb2.HeartbeatRequest, reports_epoch: int, sent: bytes
) -> tuple[control_pb2.HeartbeatRequest, bytes | None]:
    """`request` without its reports when they are the `sent` ones the controller keeps under `reports_epoch`
    (with the fingerprint None), else as it is with its reports' fingerprint."""
    fingerprint = reports_fingerprint(request)
    if reports_epoch and fingerprint == sent:
        del request.primaries[:]
        del request.replicas_held[:]
        request.reports_epoch = reports_epoch
        return request, None
    return request, fingerprint


_OPEN_FILES_EVERY_SECONDS = 5.0
# Least time between a heartbeat and one asked for with request_beat (a heartbeat builds every report of the node and
# the controller answers it: at 200 partitions per node, beat after beat took a fifth of a node's thread time).
_REQUESTED_BEAT_GAP_SECONDS = 0.1
_open_files_seen = (float("-inf"), 0)  # (when, count)


def _open_files() -> int:
    """File descriptors this process has open (0 where /proc does not tell), counted at most every 5 s: a node
    with hundreds of replicas has a thousand, and listing them every heartbeat showed in its profile."""
    global _open_files_seen
    now = time.monotonic()
    if now - _open_files_seen[0] >= _OPEN_FILES_EVERY_SECONDS:
        try:
            _open_files_seen = (now, len(os.listdir("/proc/self/fd")))
        except OSError:
            _open_files_seen = (now, 0)
    return _open_files_seen[1]
