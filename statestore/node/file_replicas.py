"""File-level replicas of partitions that run on Spark's own RocksDB provider (README, "Under Spark's own
provider"): the node's side of the replica-aware checkpoint file layer.

Primary side: the executor's JVM tells its node of each state file of a partition it kept a copy of (`FILE_KEPT` on
the local channel). The node reports itself the partition's primary, with the newest version it has files of, as it
does for our provider's partitions, so the controller places the partition's replica group, steers it after a loss
and shows it in status. It then ships each file (`Replication.KeepFile`) to the group's other nodes, and every file
it holds of the partition to a node that joins the group.

Replica side: a node that receives a file writes it into its host's copies directory (`host_copies`), where the
executor's JVM on that host serves it to a load, and reports the newest version it holds files of
(`replicas_held`): the controller's failover steers a lost partition to the holder with the newest files.

A load never depends on these copies being complete: a file without a local copy is read from the checkpoint
location (`ReplicaFiles.java`).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import grpc

from statestore import auth
from statestore.logs import log_event
from statestore.node.host_copies import INDEX_SUFFIX, FileCopyError, HostCopies, index_entry, state_file_version
from statestore.node.locate import locate
from statestore.node.settings import GRPC_MESSAGE_OPTIONS, NodeSettings
from statestore.partition_key import partition_key
from statestore.rpc import common_pb2, control_pb2, replication_pb2, replication_pb2_grpc

_log = logging.getLogger("statestore.node.file_replicas")
_CHUNK_BYTES = 1 << 20
# A send that failed (the member's node restarting: it keeps its id and address, so it never joins the group anew and
# is never sent the file again otherwise) is tried again after these delays, about 20 s in all, each time only while
# this node is the partition's primary and the member in its group (the controller drops a dead member in seconds).
_SEND_RETRY_SECONDS = (0.2, 0.4, 0.8, 1.6, 2.0, 3.0, 4.0, 4.0, 4.0)
# A replica that still claims the partition (its provider has not released it: the partition's task moved to the
# sender's executor a moment ago) is sent the file again after these delays, while the sender is the primary. In
# Real-Time Mode the claim lasted 0.2 s; the last try comes 8 s after the first.
_CLAIMED_RETRY_SECONDS = (0.25, 0.5, 1.0, 2.0, 2.0, 2.25)
_SCAN_TTL_SECONDS = 5.0
# Reads of a partition's state files this far apart belong to two loads.
_LOAD_GAP_SECONDS = 10.0
# FILE_READ's sources (the local channel's load source codes) and how status names them.
_READ_SOURCES = {0: "local files", 1: "replica files", 3: "checkpoint"}
# A partition's files are fetched from a peer once per load: asks within this long of a fetch get its result.
_FETCH_AGAIN_SECONDS = 10.0


@dataclass(frozen=True)
class KeptFile:
    """A state file this node's host kept a copy of: its checkpoint path, name under the partition's directory,
    version (0 for an SST), size, CRC32, the local copy, and the checkpoint file's modification time in ms when it
    was kept (0: not known)."""

    checkpoint_path: str
    name: str
    version: int
    size: int
    crc32: int
    copy_path: Path
    modified_ms: int = 0


@dataclass(frozen=True)
class _Send:
    """Ship `file` of partition `key` to `node` (`attempt`: how many sends of it failed before; `claimed`: how many
    the node refused as it still claimed the partition)."""

    node: control_pb2.NodeRef
    key: str
    file: KeptFile
    attempt: int = 0
    claimed: int = 0

    def again(self, attempt: int, claimed: int) -> _Send:
        """The same send, retried."""
        return _Send(self.node, self.key, self.file, attempt, claimed)


@dataclass(frozen=True)
class _Adopt:
    """Partition `key` was newly claimed here: take the host's other copies of its files as its files (`sample` is
    one of them, naming its directory)."""

    key: str
    sample: KeptFile


@dataclass
class _FilePrimary:
    store: common_pb2.StoreRef
    files: dict[str, KeptFile] = field(default_factory=dict)  # name -> file
    version: int = 0
    committed_at: float = field(default_factory=time.monotonic)
    place: control_pb2.SparkPlace | None = None
    group: list[control_pb2.NodeRef] = field(default_factory=list)
    acked: dict[str, int] = field(default_factory=dict)  # member node id -> newest version it keeps


@dataclass
class _FileLoad:
    """What a load of a partition on Spark's provider read: bytes by source, the newest version it read files of,
    and when its first and last reads were."""

    bytes_by_source: dict[int, int] = field(default_factory=dict)
    version: int = 0
    from_version: int = 0
    started: float = field(default_factory=time.monotonic)
    last: float = field(default_factory=time.monotonic)

    def report(self, now: float) -> control_pb2.LoadReport:
        most = max(self.bytes_by_source, key=lambda s: self.bytes_by_source[s]) if self.bytes_by_source else 3
        return control_pb2.LoadReport(
            source=_READ_SOURCES.get(most, "checkpoint"),
            version=self.version,
            from_version=self.from_version,
            versions_applied=max(self.version - self.from_version, 0),
            millis=int((self.last - self.started) * 1000),
            seconds_ago=max(now - self.last, 0.0),
            bytes_local_files=self.bytes_by_source.get(0, 0),
            bytes_replica_files=self.bytes_by_source.get(1, 0),
            bytes_checkpoint=self.bytes_by_source.get(3, 0),
        )


@dataclass
class _Fetch:
    """One fetch of a partition's files from a peer (FETCH_FILES): what it did, once done."""

    done: threading.Event = field(default_factory=threading.Event)
    note: str = ""
    at: float = 0.0


@dataclass
class _FileReplica:
    store: common_pb2.StoreRef
    version: int = 0
    names: dict[str, str] = field(default_factory=dict)  # name -> checkpoint path, of the files kept here
    sizes: dict[str, int] = field(default_factory=dict)  # name -> bytes, of the files kept here

    @property
    def size_bytes(self) -> int:
        return sum(self.sizes.values())


class FileReplicas:
    """The node's file-level replicas: the partitions its executor writes files of (primary) and the files peers
    shipped here (replica). `ask_groups` asks for a heartbeat now (a partition without a known group)."""

    def __init__(self, settings: NodeSettings, ask_groups: Callable[[], None]) -> None:
        self._settings = settings
        self._ask_groups = ask_groups
        directory = settings.replica_files_dir
        self.copies = HostCopies(directory, settings.identity) if directory is not None else None
        if self.copies is not None:
            swept = self.copies.sweep_leftovers()
            if swept:
                log_event(_log, "replica_files_swept", directory=str(directory), leftovers=swept)
        self._lock = threading.Lock()
        self._primaries: dict[str, _FilePrimary] = {}
        self._replicas: dict[str, _FileReplica] = {}
        self._loads: dict[str, _FileLoad] = {}  # partition key -> its last load on this executor
        self._demoted: dict[str, int] = {}  # partition key -> version the controller judged another node fresher at
        # Partition key -> SSTs its host kept while it was demoted here: the old executor's maintenance uploads a
        # snapshot after the task moved. They claim nothing; they are the partition's files if it is claimed again.
        self._held_back: dict[str, dict[str, KeptFile]] = {}
        self._closing = False
        self._sends: queue.SimpleQueue[_Send | _Adopt | None] = queue.SimpleQueue()
        self._channels: dict[str, tuple[str, grpc.Channel]] = {}  # node id -> (address, channel)
        self._channels_lock = threading.Lock()  # the sender thread and a load's fetch both open channels
        self._scan: tuple[float, dict[str, list[KeptFile]]] = (float("-inf"), {})
        self._fetches: dict[str, _Fetch] = {}  # partition key -> its last fetch from a peer
        self._recover_held()
        self._sender = threading.Thread(target=self._send_loop, name="file-replicas", daemon=True)
        self._sender.start()

    def _recover_held(self) -> None:
        """The replicas this node held before it restarted: the copies it kept from peers' shipments are on the
        host's disk, each index entry naming its partition. Found again, they are reported held from the first
        heartbeat, and a retire or a snapshot's prune removes them as before the restart."""
        if self.copies is None:
            return
        for entry, name in self.copies.kept_by_this_node():
            store = common_pb2.StoreRef(store_id=entry.store[0], checkpoint_dir=entry.store[1]) if entry.store else None
            version = state_file_version(name)
            if store is None or version is None:
                continue
            replica = self._replicas.setdefault(partition_key(store), _FileReplica(store))
            replica.names[name] = entry.checkpoint_path
            replica.sizes[name] = entry.size
            replica.version = max(replica.version, version)
        if self._replicas:
            log_event(_log, "file_replicas_recovered", partitions=len(self._replicas),
                      files=sum(len(r.names) for r in self._replicas.values()))  # fmt: skip

    # ----------------------------------------------------------------- primary side

    def kept(self, store: common_pb2.StoreRef, file: KeptFile, place: control_pb2.SparkPlace | None) -> str:
        """The executor kept a copy of `file`, a state file of partition `store` (normalized): this node is the
        partition's primary (unless the controller judged another node fresher since), and ships the file to
        the partition's replica group. Returns a note for the local channel's reply."""
        if self.copies is not None and not self.copies.holds_path(file.copy_path):
            # Shipped to peers as is: only a copy the executor's layer wrote may be named, never any file the
            # node's user can read.
            return f"refused: {file.copy_path} is not a copy in {self.copies.directory}"
        key = partition_key(store)
        with self._lock:
            demoted_at = self._demoted.get(key)
            if demoted_at is not None and (not file.version or demoted_at >= file.version):
                # An SST names no version: after a demotion it is a snapshot the old executor uploads late, and
                # claiming on it would refuse the real primary's files here as "claimed".
                if not file.version:
                    held_back = self._held_back.setdefault(key, {})
                    held_back[file.name] = file
                    _forget_deleted(held_back)
                return f"not primary of {store.store_id}: another node committed it more recently"
            self._demoted.pop(key, None)
            partition = self._primaries.get(key)
            claimed = partition is None
            if partition is None:
                partition = self._primaries[key] = _FilePrimary(store, files=self._held_back.pop(key, {}))
            partition.files[file.name] = file
            if file.name.endswith(".zip"):
                _forget_deleted(partition.files)
            if file.version >= partition.version:
                partition.version = file.version
                partition.committed_at = time.monotonic()
            if place is not None and place.run_id:
                partition.place = place
            members = list(partition.group)
        if claimed:
            log_event(_log, "file_primary", store=store.store_id, checkpoint=store.checkpoint_dir)
            self._sends.put(_Adopt(key, file))
            self._ask_groups()
        for node in members:
            self._sends.put(_Send(node, key, file))
        return f"shipping to {len(members)} replica(s)" if members else "no replica group yet"

    def read(self, store: common_pb2.StoreRef, name: str, version: int, size: int, source: int) -> str:
        """A load on this executor read `size` bytes of the partition's state file `name` (of `version`, 0 for an
        SST) from `source` (FILE_READ): summed per load, for the partition's load report."""
        if source not in _READ_SOURCES:
            return f"unknown source {source}: ignored"
        key = partition_key(store)
        now = time.monotonic()
        with self._lock:
            load = self._loads.get(key)
            if load is None or now - load.last > _LOAD_GAP_SECONDS:
                load = self._loads[key] = _FileLoad(started=now)
            load.last = now
            load.bytes_by_source[source] = load.bytes_by_source.get(source, 0) + size
            if version:
                if name.endswith(".zip"):
                    load.from_version = version
                load.version = max(load.version, version)
        return "counted"

    def set_groups(self, groups: list[control_pb2.ReplicaGroup]) -> None:
        """The controller's replica groups: a member that joins a file partition's group gets every file of it
        this host holds."""
        for group in groups:
            key = partition_key(group.store)
            with self._lock:
                partition = self._primaries.get(key)
                if partition is None:
                    continue
                before = {(n.node_id, n.address) for n in partition.group}
                partition.group = list(group.replicas)
                joined = [n for n in partition.group if (n.node_id, n.address) not in before]
                for node in joined:
                    partition.acked.pop(node.node_id, None)
                files = _in_load_order(partition.files.values())
            for node in joined:
                log_event(
                    _log, "file_replica_joined", store=group.store.store_id, replica=node.node_id, files=len(files)
                )
                for file in files:
                    self._sends.put(_Send(node, key, file))

    def demote(self, claims: list[common_pb2.VersionHeld]) -> None:
        """The controller's demotions: stop claiming each partition another node committed more recently, unless
        this host kept a file of a later version since."""
        with self._lock:
            for claim in claims:
                key = partition_key(claim.store)
                partition = self._primaries.get(key)
                if partition is None or partition.version > claim.version:
                    continue
                self._demoted[key] = claim.version
                self._held_back.pop(key, None)
                del self._primaries[key]
                log_event(_log, "file_primary_demoted", store=claim.store.store_id, version=partition.version)

    def reports(self) -> list[control_pb2.PrimaryReport]:
        """A primary report per file partition: its newest version, when it was written, and each member's."""
        now = time.monotonic()
        with self._lock:
            reports = []
            for partition in self._primaries.values():
                report = control_pb2.PrimaryReport(
                    version=partition.version,
                    seconds_since_commit=max(now - partition.committed_at, 0.0),
                    replicas=[
                        control_pb2.ReplicaProgress(node_id=n.node_id, acked_version=partition.acked.get(n.node_id, 0))
                        for n in partition.group
                    ],
                )
                report.store.CopyFrom(partition.store)
                if partition.place is not None:
                    report.place.CopyFrom(partition.place)
                load = self._loads.get(partition_key(partition.store))
                if load is not None:
                    report.last_load.CopyFrom(load.report(now))
                reports.append(report)
        return reports

    def is_primary(self, store: common_pb2.StoreRef) -> bool:
        """Whether this node claims file partition `store`."""
        with self._lock:
            return partition_key(store) in self._primaries

    # ----------------------------------------------------------------- replica side

    def receive(self, chunks: Iterator[replication_pb2.FileCopyChunk]) -> replication_pb2.FileCopyKept:
        """`Replication.KeepFile`: keep the shipped file in this host's copies directory."""
        first = next(chunks, None)
        if first is None or not first.HasField("header"):
            return replication_pb2.FileCopyKept(kept=False, detail="the stream did not begin with a FileCopyHeader")
        header = first.header
        if self.copies is None:
            return replication_pb2.FileCopyKept(
                kept=False, detail=f"{self._settings.identity} keeps no file copies (its replica files dir is unset)"
            )
        with self._lock:
            if partition_key(header.store) in self._primaries:
                return replication_pb2.FileCopyKept(
                    kept=False, detail=f"{self._settings.identity} is the primary of {header.store.store_id} now",
                    claimed_here=True,
                )

        def data() -> Iterator[bytes]:
            if first.data:
                yield first.data
            for chunk in chunks:
                yield chunk.data

        try:
            done = self.copies.write(header.checkpoint_path, header.name, header.size, header.crc32, data(),
                                     store=(header.store.store_id, header.store.checkpoint_dir),
                                     modified_ms=header.modified_ms)  # fmt: skip
        except (FileCopyError, OSError) as exc:
            log_event(_log, "file_copy_refused", logging.WARNING, store=header.store.store_id, file=header.name,
                      error=str(exc))  # fmt: skip
            return replication_pb2.FileCopyKept(kept=False, detail=str(exc))
        key = partition_key(header.store)
        with self._lock:
            replica = self._replicas.setdefault(key, _FileReplica(header.store))
            replica.names[header.name] = header.checkpoint_path
            replica.sizes[header.name] = header.size
            replica.version = max(replica.version, header.version)
        if header.name.endswith(".zip"):
            self._prune(key)
        return replication_pb2.FileCopyKept(kept=True, detail=done)

    def held(self) -> list[common_pb2.VersionHeld]:
        """The newest version this node holds files of, per file partition it is a replica of."""
        with self._lock:
            return [
                common_pb2.VersionHeld(store=r.store, version=r.version, size_bytes=r.size_bytes)
                for r in self._replicas.values()
                if r.version > 0
            ]

    def retire(self, stores: list[common_pb2.StoreRef]) -> None:
        """The controller retired this node's replicas of `stores`: the copies peers shipped here go, unless this
        node has become the partition's primary (its task moved here and loaded them): they are its files now, which
        it ships to its own group (Real-Time Mode moves a partition every batch, so this is its common case)."""
        for store in stores:
            key = partition_key(store)
            with self._lock:
                replica = self._replicas.pop(key, None)
                primary_here = key in self._primaries
            if replica is None or self.copies is None:
                continue
            if primary_here:
                log_event(_log, "file_replica_retired", store=store.store_id, copies_removed=0,
                          detail="primary here now: the copies peers shipped are its files")  # fmt: skip
                continue
            removed = sum(self.copies.delete_shipped(path, name) for name, path in replica.names.items())
            log_event(_log, "file_replica_retired", store=store.store_id, copies_removed=removed)

    def _prune(self, key: str) -> None:
        """Drop the shipped copies of partition `key` whose checkpoint file is gone (Spark's retention deleted it),
        for a checkpoint location on this machine's file system."""
        with self._lock:
            replica = self._replicas.get(key)
            names = dict(replica.names) if replica else {}
        if self.copies is None or not replica or not replica.store.checkpoint_dir.startswith("/"):
            return
        gone = [name for name, path in names.items() if not os.path.exists(path)]
        for name in gone:
            self.copies.delete_shipped(names[name], name)
        with self._lock:
            for name in gone:
                replica.names.pop(name, None)
                replica.sizes.pop(name, None)

    # ----------------------------------------------------------------- fetching from a peer

    def fetch(self, store: common_pb2.StoreRef, version: int, timeout_seconds: float) -> str:
        """FETCH_FILES: this host's executor is loading partition `store` and holds no copy of a file of it (of
        `version`, 0 for an SST): fetch every file the freshest peer holding the partition's files has (snapshots
        and changelogs from `version` on) into this host's copies directory, within `timeout_seconds`. One fetch
        per partition at a time, and at most one per `_FETCH_AGAIN_SECONDS`: a load's later misses get the first
        fetch's result. Returns what was fetched, or why nothing was."""
        key = partition_key(store)
        now = time.monotonic()
        with self._lock:
            fetch = self._fetches.get(key)
            mine = fetch is None or (fetch.done.is_set() and now - fetch.at > _FETCH_AGAIN_SECONDS)
            if mine:
                fetch = self._fetches[key] = _Fetch()
        assert fetch is not None
        if not mine:
            if not fetch.done.wait(timeout_seconds):
                return "a fetch of its files from a peer is still under way"
            return f"fetched {time.monotonic() - fetch.at:.1f} s ago: {fetch.note}"
        try:
            fetch.note = self._fetch_from_peers(store, version, now + timeout_seconds)
        except Exception as exc:  # the load must get an answer: it reads the checkpoint location then
            fetch.note = f"the fetch failed: {exc!r}"
            log_event(_log, "file_fetch_failed", logging.ERROR, store=store.store_id, error=repr(exc))
        fetch.at = time.monotonic()
        fetch.done.set()
        return fetch.note

    def _fetch_from_peers(self, store: common_pb2.StoreRef, version: int, deadline: float) -> str:
        if self.copies is None:
            return f"{self._settings.identity} keeps no file copies (its replica files dir is unset)"
        located = locate(self._settings, store, deadline)
        if isinstance(located, str):
            return located
        # The replicas, and the primary, whose host kept every file its executor wrote: freshest first.
        candidates = [*located.holders, *([located.primary] if located.HasField("primary") else [])]
        holders = sorted(
            (h for h in candidates if h.node.node_id != self._settings.identity and h.version > 0),
            key=lambda h: -h.version,
        )
        if not holders:
            return "no peer holds files of it"
        why = []
        for holder in holders:
            started = time.monotonic()
            try:
                files, size = self._receive_files(store, version, holder.node, deadline)
            except grpc.RpcError as exc:
                why.append(f"{holder.node.node_id}: {exc.code().name} {exc.details()}")
                continue
            if files:
                millis = round((time.monotonic() - started) * 1000)
                log_event(_log, "file_partition_fetched", store=store.store_id, checkpoint=store.checkpoint_dir,
                          peer=holder.node.node_id, files=files, bytes=size, millis=millis)  # fmt: skip
                return f"fetched {files} files ({size} bytes) from {holder.node.node_id} in {millis} ms"
            why.append(f"{holder.node.node_id}: sent nothing this host lacks")
        return "; ".join(why)

    def _receive_files(
        self, store: common_pb2.StoreRef, version: int, node: control_pb2.NodeRef, deadline: float
    ) -> tuple[int, int]:
        """Stream `node`'s copies of the partition's files into this host's copies directory; returns how many
        files were written, and their bytes."""
        assert self.copies is not None
        held = [f.name for f in self._host_copies_by_partition().get(_path_part(store.checkpoint_dir), [])
                if f.version == 0 and f.copy_path.exists()]  # fmt: skip
        request = replication_pb2.FilesRequest(store=store, from_version=version, held_ssts=held)
        stub = replication_pb2_grpc.ReplicationStub(self._channel(node))
        files = size = 0
        for header, data in _files_of(stub.SendFiles(request, timeout=_left(deadline))):
            try:
                done = self.copies.write(header.checkpoint_path, header.name, header.size, header.crc32, data,
                                         store=(store.store_id, store.checkpoint_dir),
                                         modified_ms=header.modified_ms)  # fmt: skip
            except (FileCopyError, OSError) as exc:
                log_event(_log, "file_copy_refused", store=store.store_id, file=header.name, peer=node.node_id,
                          error=str(exc))  # fmt: skip
                done = ""
            if done.startswith("kept"):
                files, size = files + 1, size + header.size
        return files, size

    def send_files(self, request: replication_pb2.FilesRequest) -> Iterator[replication_pb2.FileCopyChunk]:
        """`Replication.SendFiles`: every copy this host holds of the partition's state files (snapshots and
        changelogs from the newest snapshot at or below `request.from_version` on, every SST the asker lacks), each
        a header chunk and its bytes' chunks."""
        if self.copies is None:
            return
        store = request.store
        key = partition_key(store)
        directory = _path_part(store.checkpoint_dir)
        names: dict[str, str] = {f.name: f.checkpoint_path for f in self._host_copies_by_partition().get(directory, [])}
        with self._lock:
            replica = self._replicas.get(key)
            primary = self._primaries.get(key)
            names.update(replica.names if replica else {})
            names.update({f.name: f.checkpoint_path for f in primary.files.values()} if primary else {})
        held = set(request.held_ssts)
        # A load of version v starts from the newest snapshot at or below it (none: from the empty store) and
        # replays the changelogs after it; the asker's first miss may be a changelog (with checkpoint format 2,
        # Spark reads the newest changelog's lineage before it picks the snapshot), so the files from that
        # snapshot on go, not only those from the missed file's version.
        snapshots = [state_file_version(name) or 0 for name in names if name.endswith(".zip")]
        base = max((v for v in snapshots if v <= request.from_version), default=0)
        wanted = []
        for name, path in names.items():
            version = state_file_version(name)
            entry = self.copies.entry(path, name)
            if version is None or entry is None or (version and version < base):
                continue
            if not version and name in held:
                continue
            wanted.append(KeptFile(path, name, version, entry.size, entry.crc32, self.copies.copy_path(path, name),
                                   entry.modified_ms))  # fmt: skip
        for file in _in_load_order(wanted):
            try:
                source = open(file.copy_path, "rb")  # noqa: SIM115 - closed below, after its last chunk
            except OSError:
                continue  # removed meanwhile (Spark's retention)
            with source:
                header = replication_pb2.FileCopyHeader(
                    store=store, checkpoint_path=file.checkpoint_path, name=file.name, size=file.size,
                    crc32=file.crc32, version=file.version, modified_ms=file.modified_ms,
                )  # fmt: skip
                yield replication_pb2.FileCopyChunk(header=header, data=source.read(_CHUNK_BYTES))
                while data := source.read(_CHUNK_BYTES):
                    yield replication_pb2.FileCopyChunk(data=data)

    # ----------------------------------------------------------------- shipping

    def _send_loop(self) -> None:
        # Sends due again later (a peer restarting; a member still claiming the partition), by when: kept here so
        # that waiting for one never holds up the others.
        later: list[tuple[float, int, _Send]] = []
        order = itertools.count()
        while not self._closing:
            now = time.monotonic()
            if later and later[0][0] <= now:
                item: _Send | _Adopt | None = heapq.heappop(later)[2]
            else:
                try:
                    item = self._sends.get(timeout=later[0][0] - now if later else None)
                except queue.Empty:
                    continue
            if item is None or self._closing:
                return
            if isinstance(item, _Adopt):
                self._adopt_host_copies(item.key, item.sample)
                continue
            try:
                again = self._send(item)
            except grpc.RpcError as exc:
                again = None
                if item.attempt < len(_SEND_RETRY_SECONDS):  # a peer restarting: wait, then again
                    again = (_SEND_RETRY_SECONDS[item.attempt], item.again(item.attempt + 1, item.claimed))
                else:
                    log_event(_log, "file_ship_failed", logging.WARNING, replica=item.node.node_id,
                              file=item.file.name, code=exc.code().name, detail=exc.details())  # fmt: skip
            except Exception as exc:  # the sender thread must outlive any one file
                again = None
                log_event(_log, "file_ship_failed", logging.ERROR, replica=item.node.node_id, file=item.file.name,
                          error=repr(exc))  # fmt: skip
            if again is not None:
                heapq.heappush(later, (time.monotonic() + again[0], next(order), again[1]))

    def _send(self, item: _Send) -> tuple[float, _Send] | None:
        """Ship one file to one member; returns when to send it again and how, when the member refused it as it
        still claims the partition."""
        key, file = item.key, item.file
        with self._lock:
            partition = self._primaries.get(key)
            # The member as the group names it now: a node that restarted on another port is reached there.
            node = next((n for n in partition.group if n.node_id == item.node.node_id), None) if partition else None
            if partition is None or node is None:
                return None  # no longer primary, or the node left the group
            store = partition.store
        if not file.copy_path.exists():
            return None  # Spark's retention deleted it meanwhile
        header = replication_pb2.FileCopyHeader(
            checkpoint_path=file.checkpoint_path, name=file.name, size=file.size, crc32=file.crc32,
            version=file.version, modified_ms=file.modified_ms,
        )  # fmt: skip
        header.store.CopyFrom(store)

        def chunks() -> Iterator[replication_pb2.FileCopyChunk]:
            yield replication_pb2.FileCopyChunk(header=header)
            with contextlib.suppress(OSError), open(file.copy_path, "rb") as source:
                while data := source.read(_CHUNK_BYTES):
                    yield replication_pb2.FileCopyChunk(data=data)

        stub = replication_pb2_grpc.ReplicationStub(self._channel(node))
        answer = stub.KeepFile(chunks(), timeout=max(30.0, file.size / (8 << 20)))
        if not answer.kept:
            if answer.claimed_here and item.claimed < len(_CLAIMED_RETRY_SECONDS):
                return _CLAIMED_RETRY_SECONDS[item.claimed], item.again(item.attempt, item.claimed + 1)
            log_event(_log, "file_not_kept", store=store.store_id, replica=node.node_id, file=file.name,
                      detail=answer.detail)  # fmt: skip
            return None
        with self._lock:
            partition = self._primaries.get(key)
            if partition is not None and file.version > partition.acked.get(node.node_id, 0):
                partition.acked[node.node_id] = file.version
        return None

    def _channel(self, node: control_pb2.NodeRef) -> grpc.Channel:
        with self._channels_lock:
            known = self._channels.get(node.node_id)
            if known is not None and known[0] == node.address:
                return known[1]
            if known is not None:
                known[1].close()
            channel = auth.channel(node.address, options=GRPC_MESSAGE_OPTIONS)
            self._channels[node.node_id] = (node.address, channel)
            return channel

    def _adopt_host_copies(self, key: str, sample: KeptFile) -> None:
        """A partition newly claimed here (its task moved to this executor): the host's other copies of its files
        (the snapshot and changelogs its load read, shipped here or kept by an earlier executor) are its files
        too, shipped to replicas that join its group."""
        if self.copies is None:
            return
        partition_dir = sample.checkpoint_path[: -len(sample.name) - 1]
        found = self._host_copies_by_partition().get(partition_dir, [])
        with self._lock:
            partition = self._primaries.get(key)
            if partition is None:
                return
            added = [file for file in found if partition.files.setdefault(file.name, file) is file]
            members = list(partition.group)
        # A member that joined the group before this ran (the heartbeat this claim asked for answered first) was sent
        # only the files known then: the adopted ones go to it now.
        for node in members:
            for file in _in_load_order(added):
                self._sends.put(_Send(node, key, file))

    def _host_copies_by_partition(self) -> dict[str, list[KeptFile]]:
        """Every copy in the host's directory, by partition directory (one read of the directory every few
        seconds at most: a failover claims many partitions at once)."""
        at, by_partition = self._scan
        if time.monotonic() - at < _SCAN_TTL_SECONDS:
            return by_partition
        by_partition = {}
        assert self.copies is not None
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.copies.directory):
                if not entry.name.endswith(INDEX_SUFFIX) or entry.name.startswith("."):
                    continue
                try:
                    found = index_entry(Path(entry.path).read_text("utf-8").splitlines())
                except (OSError, ValueError, UnicodeDecodeError):
                    continue
                if found is None:
                    continue
                path = found.checkpoint_path
                partition_dir, _, base = path.rpartition("/")
                name = base
                if partition_dir.endswith("/SSTs"):
                    partition_dir, name = partition_dir[: -len("/SSTs")], f"SSTs/{base}"
                version = state_file_version(name)
                if version is None:
                    continue
                copy = Path(entry.path[: -len(INDEX_SUFFIX)])
                kept = KeptFile(path, name, version, found.size, found.crc32, copy, found.modified_ms)
                by_partition.setdefault(partition_dir, []).append(kept)
        self._scan = (time.monotonic(), by_partition)
        return by_partition

    def close(self) -> None:
        """Stop shipping (sends still queued are dropped: a replica that misses a file reads it from the checkpoint
        location) and close the channels to peers."""
        self._closing = True
        self._sends.put(None)
        self._sender.join(timeout=5)
        with self._channels_lock:
            channels = list(self._channels.values())
            self._channels.clear()
        for _address, channel in channels:
            channel.close()


def _forget_deleted(files: dict[str, KeptFile]) -> None:
    """Drop the files whose local copy is gone (Spark's retention deleted the checkpoint file, and the executor's
    layer its copy): a primary's list of files would otherwise grow with every micro-batch of the query's life."""
    for name in [name for name, file in files.items() if not file.copy_path.exists()]:
        del files[name]


def _in_load_order(files: Iterable[KeptFile]) -> list[KeptFile]:
    """Files in the order a load wants them: SSTs and snapshots first, then changelogs by version."""
    return sorted(files, key=lambda f: (f.name.endswith(".changelog"), f.version, f.name))


def _path_part(checkpoint_dir: str) -> str:
    """The path part of a partition's checkpoint directory, as the host's copies directory indexes files."""
    return urlparse(checkpoint_dir).path if "://" in checkpoint_dir else checkpoint_dir


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.001)


def _files_of(
    chunks: Iterator[replication_pb2.FileCopyChunk],
) -> Iterator[tuple[replication_pb2.FileCopyHeader, Iterator[bytes]]]:
    """The files of a `SendFiles` stream: each one's header and an iterator of its bytes, which must be read to its
    end before the next file is taken."""
    pending = next(chunks, None)
    while pending is not None:
        if not pending.HasField("header"):
            raise FileCopyError("a file's bytes arrived without its header")
        current, pending = pending, None

        def data(first: replication_pb2.FileCopyChunk = current) -> Iterator[bytes]:
            nonlocal pending
            if first.data:
                yield first.data
            for chunk in chunks:
                if chunk.HasField("header"):
                    pending = chunk
                    return
                yield chunk.data

        body = data()
        yield current.header, body
        for _rest in body:  # the consumer stopped early: skip to the next header
            pass
