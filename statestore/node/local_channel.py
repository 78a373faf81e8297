"""The local channel between the provider in the executor JVM and its state node.

A Unix domain socket speaking the framed messages of docs/formats.md section 6. Every `COMMITTED` takes
the same path as `Primary.Ship`: the increment is verified, kept in the increment log and queued for the
partition's replica group. `MATERIALIZE` asks for the node's copy of a partition as a RocksDB checkpoint
(answered by one `MATERIALIZED`), `INCOMING` which partitions a running hand-over moves to this node (answered
by one `INCOMING_LIST`: the executor opens them ahead of the batch that moves them), `LOAD` reports what a
committed batch cost (for load balancing), `PROMOTE` makes the node a
partition's primary, `DEMOTE` hands it the provider's unloaded directory to keep as a replica, `RELEASED` says
the provider unloaded a partition. The node answers every other request with one `REPLY`, in order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import stat
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from statestore.errors import StateStoreError
from statestore.logs import log_event
from statestore.node.provider_paths import PathRefused, ProviderPaths
from statestore.partition_key import normalized_checkpoint_dir
from statestore.rpc import common_pb2

_log = logging.getLogger("statestore.node.local_channel")

COMMITTED = 1
REPLY = 2
MATERIALIZE = 3
PROMOTE = 4
DEMOTE = 5
RELEASED = 6
MATERIALIZED = 7
INCOMING = 8
INCOMING_LIST = 9
LOAD = 10

MATERIALIZED_OK = 0
MATERIALIZED_NONE = 1
MATERIALIZED_FAILED = 2

STATUS_ACCEPTED = 0
STATUS_REPLICATED = 1
STATUS_NOT_REPLICATED = 2
STATUS_REFUSED = 3

FLAG_SYNC = 1
FLAG_REWRITES_HISTORY = 2
FLAG_PEER = 1

LINEAGE_BYTES = 16
_UNKNOWN_LINEAGE = b"\xff" * LINEAGE_BYTES

# Linux's sockaddr_un holds 108 bytes including the terminating NUL, so Python binds paths of 107 bytes; but
# Java's UnixDomainSocketAddress refuses 107 ("Unix domain path too long"), and the provider must connect.
MAX_SOCKET_PATH_BYTES = 106
# Largest value of a 64-bit field (versions, counts): the provider's Java longs are never negative.
MAX_U64_FIELD = 2**63 - 1
# Largest frame accepted: the same bound as the node's gRPC messages.
MAX_FRAME_BYTES = 512 * 1024 * 1024


class LocalChannelError(Exception):
    """The local socket cannot be served (path too long, in use, not a socket)."""


class FrameError(Exception):
    """A frame that does not follow docs/formats.md section 6."""


@dataclass(frozen=True)
class Committed:
    """A `COMMITTED` frame: version `version` of a store partition was committed by the local primary."""

    store_id: str
    checkpoint_dir: str
    version: int
    sync: bool
    rewrites_history: bool
    increment: bytes


@dataclass(frozen=True)
class Released:
    """A `RELEASED` frame: the local primary unloaded this store partition."""

    store_id: str
    checkpoint_dir: str


@dataclass(frozen=True)
class Materialize:
    """A `MATERIALIZE` frame: write a RocksDB checkpoint of the node's copy of the partition, at `version` or
    below, into `target_dir`; `allow_peer`: fetch one from a peer node if this node holds none; the provider
    waits `deadline_ms`."""

    store_id: str
    checkpoint_dir: str
    version: int
    target_dir: str
    allow_peer: bool
    deadline_ms: int


@dataclass(frozen=True)
class Materialized:
    """A `MATERIALIZED` frame: what is now in the target directory (status 0), or why nothing is."""

    status: int
    version: int
    lineage: bytes | None
    source: int
    message: str


@dataclass(frozen=True)
class Promote:
    """A `PROMOTE` frame: the provider loaded `version` of the partition to write it. Its last load from
    elsewhere than its own directory (or its first load) took version `load_version` from `source` (0 local,
    1 replica, 2 peer, 3 checkpoint location) at `from_version` in `millis`; `run_id`, `state_root`,
    `executor_id` and `executor_host` name the partition and its executor to Spark's scheduler (steering)."""

    store_id: str
    checkpoint_dir: str
    version: int
    lineage: bytes | None
    source: int
    load_version: int
    from_version: int
    millis: int
    run_id: str
    state_root: str
    executor_id: str
    executor_host: str


@dataclass(frozen=True)
class Demote:
    """A `DEMOTE` frame: the provider unloaded the partition; its closed directory `directory`, at `version`
    with `lineage`, is the node's to adopt as a replica."""

    store_id: str
    checkpoint_dir: str
    version: int
    lineage: bytes | None
    directory: str


@dataclass(frozen=True)
class Load:
    """A `LOAD` frame: what the batch that committed `version` of the partition cost its executor."""

    store_id: str
    checkpoint_dir: str
    version: int
    task_millis: int
    rows_written: int
    state_bytes: int
    executor_cores: int


@dataclass(frozen=True)
class Incoming:
    """One entry of an `INCOMING_LIST` frame: a partition a running hand-over moves to this node, and the
    version of the node's replica of it (0: none yet)."""

    store_id: str
    checkpoint_dir: str
    version: int


SOURCE_NAMES = {0: "local", 1: "replica", 2: "peer", 3: "checkpoint"}


@dataclass(frozen=True)
class Reply:
    """A `REPLY` frame."""

    status: int
    message: str


# ----------------------------------------------------------------------------- frames


class _Reader:
    def __init__(self, body: bytes) -> None:
        self._body = body
        self._at = 0

    def take(self, n: int) -> bytes:
        if self._at + n > len(self._body):
            raise FrameError(f"frame truncated: needs {self._at + n} bytes, has {len(self._body)}")
        chunk = self._body[self._at : self._at + n]
        self._at += n
        return chunk

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return struct.unpack(">H", self.take(2))[0]

    def u32(self) -> int:
        return struct.unpack(">I", self.take(4))[0]

    def u64(self) -> int:
        value = struct.unpack(">Q", self.take(8))[0]
        if value > MAX_U64_FIELD:
            # The provider writes Java longs, never negative; the node keeps them in protobuf int64 fields.
            raise FrameError(f"a 64-bit field holds {value}, over {MAX_U64_FIELD} (Java's Long.MAX_VALUE)")
        return value

    def lineage(self) -> bytes | None:
        value = self.take(LINEAGE_BYTES)
        return None if value == _UNKNOWN_LINEAGE else value

    def string(self) -> str:
        try:
            return self.take(self.u16()).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FrameError(f"string is not UTF-8: {exc}") from exc

    def end(self) -> None:
        if self._at != len(self._body):
            raise FrameError(f"{len(self._body) - self._at} trailing bytes after the fields")


def _string(value: str) -> bytes:
    data = value.encode("utf-8")
    return struct.pack(">H", len(data)) + data


def frame(frame_type: int, fields: bytes) -> bytes:
    """A whole frame: `u32 length`, `u8 type`, then the fields."""
    return struct.pack(">IB", len(fields) + 1, frame_type) + fields


def encode_committed(message: Committed) -> bytes:
    """The `COMMITTED` frame of `message` (what the provider sends)."""
    flags = (FLAG_SYNC if message.sync else 0) | (FLAG_REWRITES_HISTORY if message.rewrites_history else 0)
    fields = (
        _string(message.store_id)
        + _string(message.checkpoint_dir)
        + struct.pack(">QBI", message.version, flags, len(message.increment))
        + message.increment
    )
    return frame(COMMITTED, fields)


def decode_committed(fields: bytes) -> Committed:
    """The `COMMITTED` message whose fields (after the type byte) are `fields`. Raises FrameError."""
    reader = _Reader(fields)
    store_id = reader.string()
    checkpoint_dir = reader.string()
    version = reader.u64()
    flags = reader.u8()
    if flags & ~(FLAG_SYNC | FLAG_REWRITES_HISTORY):
        raise FrameError(f"unknown flag bits {flags:#04x}")
    increment = reader.take(reader.u32())
    reader.end()
    return Committed(
        store_id, checkpoint_dir, version, bool(flags & FLAG_SYNC), bool(flags & FLAG_REWRITES_HISTORY), increment
    )


def encode_released(message: Released) -> bytes:
    """The `RELEASED` frame of `message` (what the provider sends when it unloads a store)."""
    return frame(RELEASED, _string(message.store_id) + _string(message.checkpoint_dir))


def decode_released(fields: bytes) -> Released:
    """The `RELEASED` message whose fields (after the type byte) are `fields`. Raises FrameError."""
    reader = _Reader(fields)
    store_id = reader.string()
    checkpoint_dir = reader.string()
    reader.end()
    return Released(store_id, checkpoint_dir)


def _lineage(value: bytes | None) -> bytes:
    return _UNKNOWN_LINEAGE if value is None else value


def encode_materialize(message: Materialize) -> bytes:
    """The `MATERIALIZE` frame of `message` (what the provider sends to load a partition)."""
    fields = (
        _string(message.store_id)
        + _string(message.checkpoint_dir)
        + struct.pack(">Q", message.version)
        + _string(message.target_dir)
        + struct.pack(">BI", FLAG_PEER if message.allow_peer else 0, message.deadline_ms)
    )
    return frame(MATERIALIZE, fields)


def decode_materialize(fields: bytes) -> Materialize:
    """The `MATERIALIZE` message whose fields are `fields`. Raises FrameError."""
    reader = _Reader(fields)
    store_id, checkpoint_dir, version, target = reader.string(), reader.string(), reader.u64(), reader.string()
    flags = reader.u8()
    if flags & ~FLAG_PEER:
        raise FrameError(f"unknown flag bits {flags:#04x}")
    deadline_ms = reader.u32()
    reader.end()
    return Materialize(store_id, checkpoint_dir, version, target, bool(flags & FLAG_PEER), deadline_ms)


def encode_materialized(message: Materialized) -> bytes:
    """The `MATERIALIZED` frame answering a `MATERIALIZE`."""
    fields = (
        struct.pack(">BQ", message.status, message.version)
        + _lineage(message.lineage)
        + bytes([message.source])
        + _string(message.message[:4000])
    )
    return frame(MATERIALIZED, fields)


def decode_materialized(fields: bytes) -> Materialized:
    """The `MATERIALIZED` message whose fields are `fields`. Raises FrameError."""
    reader = _Reader(fields)
    status, version, lineage = reader.u8(), reader.u64(), reader.lineage()
    source, message = reader.u8(), reader.string()
    reader.end()
    return Materialized(status, version, lineage, source, message)


def encode_promote(message: Promote) -> bytes:
    """The `PROMOTE` frame of `message`."""
    fields = (
        _string(message.store_id)
        + _string(message.checkpoint_dir)
        + struct.pack(">Q", message.version)
        + _lineage(message.lineage)
        + struct.pack(">BQQI", message.source, message.load_version, message.from_version, message.millis)
        + _string(message.run_id)
        + _string(message.state_root)
        + _string(message.executor_id)
        + _string(message.executor_host)
    )
    return frame(PROMOTE, fields)


def decode_promote(fields: bytes) -> Promote:
    """The `PROMOTE` message whose fields are `fields`. Raises FrameError."""
    reader = _Reader(fields)
    store_id, checkpoint_dir, version, lineage = reader.string(), reader.string(), reader.u64(), reader.lineage()
    source, load_version, from_version, millis = reader.u8(), reader.u64(), reader.u64(), reader.u32()
    if source not in SOURCE_NAMES:
        raise FrameError(f"unknown load source {source}")
    run_id, state_root, executor_id, executor_host = reader.string(), reader.string(), reader.string(), reader.string()
    reader.end()
    return Promote(
        store_id, checkpoint_dir, version, lineage, source, load_version, from_version, millis, run_id, state_root,
        executor_id, executor_host,
    )


def encode_demote(message: Demote) -> bytes:
    """The `DEMOTE` frame of `message`."""
    fields = (
        _string(message.store_id)
        + _string(message.checkpoint_dir)
        + struct.pack(">Q", message.version)
        + _lineage(message.lineage)
        + _string(message.directory)
    )
    return frame(DEMOTE, fields)


def decode_demote(fields: bytes) -> Demote:
    """The `DEMOTE` message whose fields are `fields`. Raises FrameError."""
    reader = _Reader(fields)
    store_id, checkpoint_dir, version, lineage = reader.string(), reader.string(), reader.u64(), reader.lineage()
    directory = reader.string()
    reader.end()
    return Demote(store_id, checkpoint_dir, version, lineage, directory)


def encode_load(message: Load) -> bytes:
    """The `LOAD` frame of `message` (what the provider sends after a commit)."""
    fields = (
        _string(message.store_id)
        + _string(message.checkpoint_dir)
        + struct.pack(
            ">QIQQH",
            message.version,
            message.task_millis,
            message.rows_written,
            message.state_bytes,
            message.executor_cores,
        )
    )
    return frame(LOAD, fields)


def decode_load(fields: bytes) -> Load:
    """The `LOAD` message whose fields are `fields`. Raises FrameError."""
    reader = _Reader(fields)
    store_id, checkpoint_dir = reader.string(), reader.string()
    version, task_millis, rows = reader.u64(), reader.u32(), reader.u64()
    state_bytes, cores = reader.u64(), reader.u16()
    reader.end()
    return Load(store_id, checkpoint_dir, version, task_millis, rows, state_bytes, cores)


def encode_incoming_list(entries: list[Incoming]) -> bytes:
    """The `INCOMING_LIST` frame answering an `INCOMING` (which has no fields)."""
    fields = struct.pack(">H", len(entries)) + b"".join(
        _string(e.store_id) + _string(e.checkpoint_dir) + struct.pack(">Q", e.version) for e in entries
    )
    return frame(INCOMING_LIST, fields)


def decode_incoming_list(fields: bytes) -> list[Incoming]:
    """The entries of an `INCOMING_LIST` frame whose fields are `fields`. Raises FrameError."""
    reader = _Reader(fields)
    entries = [Incoming(reader.string(), reader.string(), reader.u64()) for _ in range(reader.u16())]
    reader.end()
    return entries


def encode_reply(reply: Reply) -> bytes:
    """The `REPLY` frame of `reply`."""
    return frame(REPLY, bytes([reply.status]) + _string(reply.message[:4000]))


def decode_reply(fields: bytes) -> Reply:
    """The `REPLY` message whose fields (after the type byte) are `fields`. Raises FrameError."""
    reader = _Reader(fields)
    status = reader.u8()
    message = reader.string()
    reader.end()
    return Reply(status, message)


def _recv_exactly(conn: socket.socket, n: int) -> bytes | None:
    chunks = []
    remaining = n
    while remaining:
        chunk = conn.recv(min(remaining, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_frame(conn: socket.socket) -> tuple[int, bytes] | None:
    """The next frame's (type, fields), or None at a clean end of stream. Raises FrameError."""
    header = _recv_exactly(conn, 4)
    if header is None:
        return None
    (length,) = struct.unpack(">I", header)
    if length < 1 or length > MAX_FRAME_BYTES:
        raise FrameError(f"frame length {length} outside 1..{MAX_FRAME_BYTES}")
    body = _recv_exactly(conn, length)
    if body is None:
        raise FrameError(f"stream ended inside a frame of {length} bytes")
    return body[0], body[1:]


def _header_mismatch(message: Committed) -> str:
    """Why the increment's header disagrees with the frame's store and version ("" when it agrees).

    Only the header's identity and version: the shipping path checks the whole increment (format, CRC).
    """
    data = message.increment
    if len(data) < 10 or data[:4] != b"SSIN":
        return f"increment of {message.store_id} version {message.version} is not an increment (bad magic)"
    (id_len,) = struct.unpack_from(">H", data, 8)
    if len(data) < 10 + id_len + 8:
        return f"increment of {message.store_id} version {message.version} is truncated"
    store_id = data[10 : 10 + id_len].decode("utf-8", errors="replace")
    (version,) = struct.unpack_from(">Q", data, 10 + id_len)
    if store_id != message.store_id or version != message.version:
        return (
            f"frame says store {message.store_id!r} version {message.version}, "
            f"its increment says store {store_id!r} version {version}"
        )
    return ""


# ----------------------------------------------------------------------------- the server

@dataclass(frozen=True)
class ShipResult:
    """What the shipping path did with one increment: whether a replica acked it (sync) and a note."""

    synced: bool
    detail: str


class LocalPrimary(Protocol):
    """What the node does for its local provider; every store it is given is normalized."""

    def ship(self, store: common_pb2.StoreRef, message: Committed) -> ShipResult:
        """COMMITTED: ship the increment to the partition's replica group."""

    def release(self, store: common_pb2.StoreRef) -> bool:
        """RELEASED: stop being the partition's primary; returns whether the node was."""

    def materialize(self, store: common_pb2.StoreRef, message: Materialize) -> Materialized:
        """MATERIALIZE: write the node's copy of the partition into the target directory."""

    def promote(self, store: common_pb2.StoreRef, message: Promote) -> str:
        """PROMOTE: become the partition's primary; returns a note for the REPLY."""

    def demote(self, store: common_pb2.StoreRef, message: Demote) -> str:
        """DEMOTE: stop being the partition's primary and adopt the directory as a replica; returns a note."""

    def incoming(self) -> list[Incoming]:
        """INCOMING: the partitions a running hand-over moves to this node, with its replicas' versions."""

    def load(self, store: common_pb2.StoreRef, message: Load) -> str:
        """LOAD: what a committed batch of the partition cost its executor; returns a note for the REPLY."""


class LocalChannelServer:
    """Serves the local socket: one thread accepts, one thread per connection answers its requests in order."""

    def __init__(self, path: Path, primary: LocalPrimary, paths: ProviderPaths) -> None:
        self.path = Path(path)
        self._primary = primary
        self._paths = paths
        self._listener: socket.socket | None = None
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()

    def start(self) -> None:
        """Bind the socket (replacing a stale one nobody listens on) and accept connections."""
        encoded = os.fsencode(self.path)
        if len(encoded) > MAX_SOCKET_PATH_BYTES:
            raise LocalChannelError(
                f"local socket path {self.path} is too long ({len(encoded)} bytes, at most {MAX_SOCKET_PATH_BYTES})"
            )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._remove_stale_socket()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(self.path))
        except OSError as exc:
            listener.close()
            raise LocalChannelError(f"cannot listen on local socket {self.path}: {exc.strerror or exc}") from exc
        os.chmod(self.path, 0o600)  # the provider runs as this node's user; nobody else may connect
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept_loop, name="local-channel", daemon=True).start()
        log_event(_log, "local_channel_listening", socket=str(self.path))

    def _remove_stale_socket(self) -> None:
        try:
            mode = self.path.lstat().st_mode
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(mode):
            raise LocalChannelError(f"local socket path {self.path} exists and is not a socket")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(1.0)
            try:
                probe.connect(str(self.path))
            except OSError:
                self.path.unlink(missing_ok=True)  # left by a node that died: nobody listens
                log_event(_log, "local_channel_stale_socket_removed", socket=str(self.path))
                return
        raise LocalChannelError(f"local socket {self.path} is in use: another node listens there")

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed by stop()
            with self._lock:
                self._connections.add(conn)
            threading.Thread(target=self._serve, args=(conn,), name="local-channel-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            while True:
                try:
                    received = read_frame(conn)
                except FrameError as exc:
                    log_event(_log, "local_channel_bad_frame", logging.WARNING, error=str(exc))
                    conn.sendall(encode_reply(Reply(STATUS_REFUSED, f"bad frame: {exc}")))
                    return  # framing is lost: the provider reconnects
                if received is None:
                    return
                frame_type, fields = received
                conn.sendall(self._answer_safely(frame_type, fields))
        except OSError:
            pass  # the provider went away; it reconnects on a later commit
        finally:
            with self._lock:
                self._connections.discard(conn)
            conn.close()

    def _answer_safely(self, frame_type: int, fields: bytes) -> bytes:
        """`_answer`, or a refusal of the right type when answering failed unexpectedly: the provider always gets
        one answer per request, and the connection stays in step."""
        try:
            return self._answer(frame_type, fields)
        except Exception as exc:
            _log.exception("local channel: answering a frame of type %d failed", frame_type)
            why = f"node failed to answer frame type {frame_type}: {exc!r}"
            if frame_type == MATERIALIZE:
                return encode_materialized(Materialized(MATERIALIZED_FAILED, 0, None, 0, why))
            return encode_reply(Reply(STATUS_REFUSED, why))

    def _answer(self, frame_type: int, fields: bytes) -> bytes:
        """The whole answer frame to one request: a `MATERIALIZED` for `MATERIALIZE`, an `INCOMING_LIST` for
        `INCOMING`, else a `REPLY`."""
        if frame_type == MATERIALIZE:
            return encode_materialized(self._answer_materialize(fields))
        if frame_type == INCOMING:
            if fields:
                return encode_reply(Reply(STATUS_REFUSED, "bad INCOMING frame: it has no fields"))
            return encode_incoming_list(self._primary.incoming()[:1000])
        handlers = {
            COMMITTED: self._answer_committed,
            RELEASED: self._answer_released,
            PROMOTE: self._answer_promote,
            DEMOTE: self._answer_demote,
            LOAD: self._answer_load,
        }
        handler = handlers.get(frame_type)
        if handler is None:
            return encode_reply(Reply(STATUS_REFUSED, f"frame type {frame_type} is not supported by this node"))
        return encode_reply(handler(fields))

    def _answer_committed(self, fields: bytes) -> Reply:
        try:
            message = decode_committed(fields)
        except FrameError as exc:
            return Reply(STATUS_REFUSED, f"bad COMMITTED frame: {exc}")
        mismatch = _header_mismatch(message)
        if mismatch:
            return Reply(STATUS_REFUSED, mismatch)
        try:
            result = self._primary.ship(_store(message.store_id, message.checkpoint_dir), message)
        except StateStoreError as exc:
            log_event(
                _log,
                "local_commit_refused",
                logging.WARNING,
                store=message.store_id,
                version=message.version,
                error=str(exc),
            )
            return Reply(STATUS_REFUSED, f"refused increment: {exc}")
        except Exception as exc:  # the provider must get an answer whatever went wrong here
            log_event(
                _log,
                "local_commit_failed",
                logging.ERROR,
                store=message.store_id,
                version=message.version,
                error=repr(exc),
            )
            return Reply(STATUS_REFUSED, f"node failed to ship: {exc!r}")
        if not message.sync:
            return Reply(STATUS_ACCEPTED, result.detail)
        return Reply(STATUS_REPLICATED if result.synced else STATUS_NOT_REPLICATED, result.detail)

    def _answer_released(self, fields: bytes) -> Reply:
        try:
            message = decode_released(fields)
        except FrameError as exc:
            return Reply(STATUS_REFUSED, f"bad RELEASED frame: {exc}")
        was_primary = self._primary.release(_store(message.store_id, message.checkpoint_dir))
        return Reply(STATUS_ACCEPTED, "released" if was_primary else "was not primary here")

    def _answer_materialize(self, fields: bytes) -> Materialized:
        try:
            message = decode_materialize(fields)
            self._paths.checked(message.target_dir, "target_dir")
        except (FrameError, PathRefused) as exc:
            log_event(_log, "local_channel_frame_refused", logging.WARNING, frame="MATERIALIZE", error=str(exc))
            return Materialized(MATERIALIZED_FAILED, 0, None, 0, f"bad MATERIALIZE frame: {exc}")
        try:
            return self._primary.materialize(_store(message.store_id, message.checkpoint_dir), message)
        except Exception as exc:  # the provider must get an answer: it then restores from the checkpoint location
            log_event(_log, "materialize_failed", logging.ERROR, store=message.store_id, error=repr(exc))
            return Materialized(MATERIALIZED_FAILED, 0, None, 0, f"node failed: {exc!r}")

    def _answer_promote(self, fields: bytes) -> Reply:
        return _noted("PROMOTE", fields, decode_promote, self._primary.promote)

    def _answer_demote(self, fields: bytes) -> Reply:
        try:
            message = decode_demote(fields)
        except FrameError as exc:
            return Reply(STATUS_REFUSED, f"bad DEMOTE frame: {exc}")
        refused = ""
        if message.directory:
            try:
                self._paths.checked(message.directory, "directory")
            except PathRefused as exc:
                refused = str(exc)
                log_event(_log, "local_channel_frame_refused", logging.WARNING, frame="DEMOTE", error=refused)
                message = dataclasses.replace(message, directory="")  # released, nothing adopted
        note = self._primary.demote(_store(message.store_id, message.checkpoint_dir), message)
        if refused:
            return Reply(STATUS_REFUSED, f"{note}; the directory is not adopted: {refused}")
        return Reply(STATUS_ACCEPTED, note)

    def _answer_load(self, fields: bytes) -> Reply:
        return _noted("LOAD", fields, decode_load, self._primary.load)

    def stop(self) -> None:
        """Stop accepting, close every connection and remove the socket file."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (close alone does not)
            self._listener.close()
            self.path.unlink(missing_ok=True)
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()


def _noted(
    name: str, fields: bytes, decode: Callable[[bytes], Any], act: Callable[[common_pb2.StoreRef, Any], str]
) -> Reply:
    """The REPLY to a notice frame: decoded, handed to the node (which returns a note), or refused if malformed."""
    try:
        message = decode(fields)
    except FrameError as exc:
        return Reply(STATUS_REFUSED, f"bad {name} frame: {exc}")
    return Reply(STATUS_ACCEPTED, act(_store(message.store_id, message.checkpoint_dir), message))


def _store(store_id: str, checkpoint_dir: str) -> common_pb2.StoreRef:
    return common_pb2.StoreRef(store_id=store_id, checkpoint_dir=normalized_checkpoint_dir(checkpoint_dir))
