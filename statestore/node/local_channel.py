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

from statestore.contract.frame_wire import LINEAGE_BYTES, MAX_U64_FIELD, FrameError, frame
from statestore.contract.local_channel_frames import (
    COMMITTED,
    DEMOTE,
    FETCH_FILES,
    FILE_KEPT,
    FILE_READ,
    FLAG_PEER,
    FLAG_REWRITES_HISTORY,
    FLAG_SYNC,
    INCOMING,
    INCOMING_LIST,
    LOAD,
    MATERIALIZE,
    MATERIALIZED,
    MATERIALIZED_FAILED,
    MATERIALIZED_NONE,
    MATERIALIZED_OK,
    PROMOTE,
    RELEASED,
    REPLY,
    SOURCE_CHECKPOINT,
    SOURCE_LOCAL,
    SOURCE_PEER,
    SOURCE_REPLICA,
    STATUS_ACCEPTED,
    STATUS_NOT_REPLICATED,
    STATUS_REFUSED,
    STATUS_REPLICATED,
    Committed,
    Demote,
    FetchFiles,
    FileKept,
    FileRead,
    Incoming,
    IncomingList,
    IncomingRequest,
    Load,
    Materialize,
    Materialized,
    Promote,
    Released,
    Reply,
    decode_committed,
    decode_demote,
    decode_fetch_files,
    decode_file_kept,
    decode_file_read,
    decode_incoming,
    decode_incoming_list,
    decode_load,
    decode_materialize,
    decode_materialized,
    decode_promote,
    decode_released,
    decode_reply,
    encode_committed,
    encode_demote,
    encode_fetch_files,
    encode_file_kept,
    encode_file_read,
    encode_incoming,
    encode_incoming_list,
    encode_load,
    encode_materialize,
    encode_materialized,
    encode_promote,
    encode_released,
    encode_reply,
)
from statestore.errors import StateStoreError
from statestore.logs import log_event
from statestore.node.provider_paths import PathRefused, ProviderPaths
from statestore.partition_key import normalized_checkpoint_dir
from statestore.rpc import common_pb2

_log = logging.getLogger("statestore.node.local_channel")

# The frames are the contract's (generated from protos/contract/local_channel.toml); served here as the channel's API.
__all__ = [
    "COMMITTED",
    "DEMOTE",
    "FETCH_FILES",
    "FLAG_PEER",
    "FLAG_REWRITES_HISTORY",
    "FLAG_SYNC",
    "INCOMING",
    "INCOMING_LIST",
    "LINEAGE_BYTES",
    "LOAD",
    "MATERIALIZE",
    "MATERIALIZED",
    "MATERIALIZED_FAILED",
    "MATERIALIZED_NONE",
    "MATERIALIZED_OK",
    "MAX_U64_FIELD",
    "PROMOTE",
    "RELEASED",
    "REPLY",
    "SOURCE_CHECKPOINT",
    "SOURCE_LOCAL",
    "SOURCE_PEER",
    "SOURCE_REPLICA",
    "STATUS_ACCEPTED",
    "STATUS_NOT_REPLICATED",
    "STATUS_REFUSED",
    "STATUS_REPLICATED",
    "Committed",
    "Demote",
    "FetchFiles",
    "FileKept",
    "FileRead",
    "FrameError",
    "Incoming",
    "IncomingList",
    "IncomingRequest",
    "Load",
    "Materialize",
    "Materialized",
    "Promote",
    "Released",
    "Reply",
    "decode_committed",
    "decode_demote",
    "decode_fetch_files",
    "decode_file_kept",
    "decode_file_read",
    "decode_incoming",
    "decode_incoming_list",
    "decode_load",
    "decode_materialize",
    "decode_materialized",
    "decode_promote",
    "decode_released",
    "decode_reply",
    "encode_committed",
    "encode_demote",
    "encode_fetch_files",
    "encode_file_kept",
    "encode_file_read",
    "encode_incoming",
    "encode_incoming_list",
    "encode_load",
    "encode_materialize",
    "encode_materialized",
    "encode_promote",
    "encode_released",
    "encode_reply",
    "frame",
]

# Linux's sockaddr_un holds 108 bytes including the terminating NUL, so Python binds paths of 107 bytes; but
# Java's UnixDomainSocketAddress refuses 107 ("Unix domain path too long"), and the provider must connect.
MAX_SOCKET_PATH_BYTES = 106
# Largest frame accepted: the same bound as the node's gRPC messages.
MAX_FRAME_BYTES = 512 * 1024 * 1024

SOURCE_NAMES = {SOURCE_LOCAL: "local", SOURCE_REPLICA: "replica", SOURCE_PEER: "peer", SOURCE_CHECKPOINT: "checkpoint"}


class LocalChannelError(Exception):
    """The local socket cannot be served (path too long, in use, not a socket)."""


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

    def file_kept(self, store: common_pb2.StoreRef, message: FileKept) -> str:
        """FILE_KEPT: ship a state file of a partition on Spark's own provider to its group; returns a note."""

    def file_read(self, store: common_pb2.StoreRef, message: FileRead) -> str:
        """FILE_READ: count what a load of a partition on Spark's own provider read; returns a note."""

    def fetch_files(self, store: common_pb2.StoreRef, message: FetchFiles) -> str:
        """FETCH_FILES: fetch a partition's state files from a peer holding them; returns what was fetched."""


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
            return encode_incoming_list(IncomingList(self._primary.incoming()[:1000]))
        handlers = {
            COMMITTED: self._answer_committed,
            RELEASED: self._answer_released,
            PROMOTE: self._answer_promote,
            DEMOTE: self._answer_demote,
            LOAD: self._answer_load,
            FILE_KEPT: self._answer_file_kept,
            FILE_READ: self._answer_file_read,
            FETCH_FILES: self._answer_fetch_files,
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
            target = self._paths.checked(message.target_dir, "target_dir")  # resolved: the node writes there
            message = dataclasses.replace(message, target_dir=str(target))
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
                directory = self._paths.checked(message.directory, "directory")  # resolved: the node moves it
                message = dataclasses.replace(message, directory=str(directory))
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

    def _answer_file_kept(self, fields: bytes) -> Reply:
        return _noted("FILE_KEPT", fields, decode_file_kept, self._primary.file_kept)

    def _answer_file_read(self, fields: bytes) -> Reply:
        return _noted("FILE_READ", fields, decode_file_read, self._primary.file_read)

    def _answer_fetch_files(self, fields: bytes) -> Reply:
        return _noted("FETCH_FILES", fields, decode_fetch_files, self._primary.fetch_files)

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
