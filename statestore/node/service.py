"""The node's gRPC servicers: Replication (peers ship, pull, bootstrap) and Primary (the local primary ships)."""

from __future__ import annotations

import logging
import queue
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc

from statestore.checkpoint_location import CheckpointLocation
from statestore.errors import StateStoreError
from statestore.faults.points import FaultInjected, fault_point
from statestore.logs import log_event
from statestore.node.bootstrap import stream_snapshot
from statestore.node.catch_up import increment_bytes_for_pull
from statestore.node.file_replicas import FileReplicas
from statestore.node.increment_log import IncrementLog
from statestore.node.partition_lanes import PartitionLanes
from statestore.node.replica import ReplicaSet
from statestore.node.settings import NodeSettings
from statestore.node.shipper import Shipper
from statestore.partition_key import normalized, partition_key, store_ref_problem
from statestore.rpc import common_pb2, replication_pb2, replication_pb2_grpc
from statestore.snapshot import manifest_of, read_manifest

_log = logging.getLogger("statestore.node.service")
# Threads a replica link's partitions are handled on at once (each partition's increments in order).
_SHIP_LANES = 4


class ReplicationService(replication_pb2_grpc.ReplicationServicer):
    """What a node serves its peers: a replica's end of Ship, and Pull and Bootstrap for catching up."""

    def __init__(
        self,
        settings: NodeSettings,
        replicas: ReplicaSet,
        log: IncrementLog,
        is_primary: Callable[[common_pb2.StoreRef], bool],
        awaits_local_release: Callable[[common_pb2.StoreRef], bool] = lambda _store: False,
        file_replicas: FileReplicas | None = None,
    ) -> None:
        self._settings = settings
        self._file_replicas = file_replicas
        self._replicas = replicas
        self._log = log
        self._is_primary = is_primary
        self._awaits_local_release = awaits_local_release

    def _serves(self, store: common_pb2.StoreRef) -> bool:
        """Whether Pull and Bootstrap may read this partition's increments or snapshots here: only one this node
        is primary of, holds a replica of, or shipped increments of lately, never any checkpoint location a
        caller names (docs/security.md)."""
        return self._is_primary(store) or self._replicas.get(store) is not None or self._log.has(partition_key(store))

    def _not_served(self, store: common_pb2.StoreRef) -> str:
        return (
            f"{self._settings.identity} serves only partitions it is primary of, holds a replica of or shipped "
            f"lately, not {store.store_id} at {store.checkpoint_dir}"
        )

    def _failed(self, blob: common_pb2.IncrementBlob, detail: str) -> replication_pb2.ShipAck:
        """The ack of an increment this node did not take, saying why."""
        return replication_pb2.ShipAck(
            held=common_pb2.VersionHeld(store=blob.store, version=0),
            version=blob.version,
            status=replication_pb2.ACK_FAILED,
            replica_node=self._settings.identity,
            detail=detail,
        )

    def KeepFile(
        self, request_iterator: Iterator[replication_pb2.FileCopyChunk], context: grpc.ServicerContext
    ) -> replication_pb2.FileCopyKept:
        """Keep a state file of a partition on Spark's own RocksDB provider that its primary's host shipped, in this
        host's copies directory (statestore.node.file_replicas)."""
        if self._file_replicas is None:
            return replication_pb2.FileCopyKept(kept=False, detail=f"{self._settings.identity} keeps no file copies")
        return self._file_replicas.receive(request_iterator)

    def SendFiles(
        self, request: replication_pb2.FilesRequest, context: grpc.ServicerContext
    ) -> Iterator[replication_pb2.FileCopyChunk]:
        """The copies this host holds of a partition's state files on Spark's own RocksDB provider, for a peer whose
        executor loads the partition without them (statestore.node.file_replicas)."""
        if self._file_replicas is None:
            return iter(())
        return self._file_replicas.send_files(request)

    def Ship(
        self, request_iterator: Iterator[replication_pb2.ShipRequest], context: grpc.ServicerContext
    ) -> Iterator[replication_pb2.ShipAck]:
        """Receive increments and ack, for each, the version held of its partition. Each partition's increments
        are handled in order, different partitions' side by side (`PartitionLanes`): a slow one (a catch-up, a
        bootstrap) holds up no other partition of the link. Acks of different partitions may so come out of
        order; each names its partition and version."""
        acks: queue.SimpleQueue[replication_pb2.ShipAck | None] = queue.SimpleQueue()
        lanes = PartitionLanes(_SHIP_LANES, "ship-lane")

        def handle(request: replication_pb2.ShipRequest) -> None:
            try:
                acks.put(self._receive(request))
            except Exception as exc:  # every request gets its ack, whatever went wrong
                log_event(_log, "ship_failed", logging.ERROR, store=request.increment.store.store_id, error=repr(exc))
                acks.put(self._failed(request.increment, f"{self._settings.identity} failed: {exc!r}"))

        def read() -> None:
            try:
                for request in request_iterator:
                    lanes.submit(partition_key(request.increment.store), lambda r=request: handle(r))
            except Exception as exc:  # the stream ended badly (the primary's node went away)
                log_event(_log, "ship_stream_ended", error=repr(exc))
            finally:
                lanes.shutdown()
                acks.put(None)

        threading.Thread(target=read, name="ship-reader", daemon=True).start()
        while (ack := acks.get()) is not None:
            yield ack

    def _receive(self, request: replication_pb2.ShipRequest) -> replication_pb2.ShipAck:
        """Take one shipped increment into its replica (or say why not)."""
        blob = request.increment
        problem = store_ref_problem(blob.store) or _version_problem(blob.version, "increment.version")
        if problem:
            return self._failed(blob, f"refused: {problem}")
        if self._is_primary(blob.store):
            # A late shipment of a former primary (demoted, or not told yet): this node's own store is the
            # partition now, and a replica built from that stream could hold the history it abandoned.
            return self._failed(blob, f"{self._settings.identity} is the primary of {blob.store.store_id} now")
        if self._replicas.get(blob.store) is None and self._awaits_local_release(blob.store):
            # A hand-over moved the partition away and its store here is still open in the provider: it
            # becomes this replica when Spark closes it (DEMOTE), at the cost of nothing; the shipper
            # retries meanwhile, and the replica fills whatever it missed once adopted.
            awaited = f"{self._settings.identity} awaits its provider's store of {blob.store.store_id} (DEMOTE)"
            return self._failed(blob, awaited)
        replica = self._replicas.get_or_create(blob.store)
        if self._is_primary(blob.store):
            # Promoted between the check above and now (the promotion dropped any replica before this one was
            # made): a replica of a partition this node leads, fed by its former primary, must not stay.
            self._replicas.drop(blob.store, "this node became the partition's primary as the shipment arrived")
            return self._failed(blob, f"{self._settings.identity} is the primary of {blob.store.store_id} now")
        receipt = replica.receive(blob, request.primary_address)
        self._replicas.settle(replica)
        return replication_pb2.ShipAck(
            held=common_pb2.VersionHeld(store=replica.ref, version=receipt.held),
            version=blob.version,
            status=receipt.outcome.value,
            replica_node=self._settings.identity,
            detail=receipt.detail,
        )

    def Pull(
        self, request: replication_pb2.PullRequest, context: grpc.ServicerContext
    ) -> Iterator[common_pb2.IncrementBlob]:
        """Increments from this node's log, else from the partition's checkpoint location, until one is missing."""
        store = request.store
        problem = store_ref_problem(store) or _version_problem(request.from_version, "from_version")
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        if not self._serves(store):
            context.abort(grpc.StatusCode.NOT_FOUND, self._not_served(store))
        location = None
        if store.checkpoint_dir:
            try:
                location = CheckpointLocation(store.checkpoint_dir, store.store_id)
            except StateStoreError as exc:  # an unsupported scheme: the log alone serves
                log_event(_log, "checkpoint_read_failed", logging.WARNING, store=store.store_id, error=str(exc))
        for version in range(request.from_version, request.to_version + 1):
            data = self._log.get(partition_key(store), version)
            if data is None and location is not None:
                data = increment_bytes_for_pull(location, version)
            if data is None:
                log_event(_log, "pull_short", store=store.store_id, missing=version, requested_to=request.to_version)
                return
            yield common_pb2.IncrementBlob(store=store, version=version, base_version=version - 1, data=data)

    def Bootstrap(
        self, request: replication_pb2.BootstrapRequest, context: grpc.ServicerContext
    ) -> Iterator[replication_pb2.SnapshotChunk]:
        """A snapshot of the partition: of this node's replica if held (never of one of a partition this node is
        primary of: it may hold an abandoned history), else the checkpoint location's newest."""
        store = request.store
        problem = store_ref_problem(store)
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        try:
            fault_point("bootstrap-serve", store.store_id)
        except FaultInjected as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        rate = request.bytes_per_second or self._settings.bootstrap_bytes_per_second
        chunk = request.chunk_bytes or self._settings.bootstrap_chunk_bytes
        replica = None if self._is_primary(store) else self._replicas.get(store)
        if replica is not None and replica.version > 0:
            # A checkpoint beside the replica (hard links, read once for the manifest), so that applying
            # increments meanwhile does not disturb the stream.
            staging = Path(tempfile.mkdtemp(prefix=".serve-", dir=replica.directory))
            try:
                snapshot_dir = staging / "snapshot"
                with replica.locked():
                    if replica.retired:
                        context.abort(grpc.StatusCode.NOT_FOUND, f"the replica of {store.store_id} was dropped")
                    if request.at_most > 0 and replica.version > request.at_most:
                        held = replica.checkpoint_into(snapshot_dir, request.at_most)
                        if isinstance(held, str):
                            context.abort(grpc.StatusCode.NOT_FOUND, f"{self._settings.identity}: {held}")
                        version = held[0]
                    else:
                        replica.store.checkpoint(snapshot_dir)
                        version = replica.version
                manifest = manifest_of(snapshot_dir, store.store_id, version)
                log_event(
                    _log,
                    "bootstrap_serving",
                    store=store.store_id,
                    source="replica",
                    version=manifest.version,
                    bytes=manifest.total_bytes,
                    bytes_per_second=rate,
                )
                yield from stream_snapshot(snapshot_dir, manifest, rate, chunk)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            return
        if request.replica_only:
            context.abort(grpc.StatusCode.NOT_FOUND, f"{self._settings.identity} holds no replica of {store.store_id}")
        if not self._serves(store):
            context.abort(grpc.StatusCode.NOT_FOUND, self._not_served(store))
        try:
            location = CheckpointLocation(store.checkpoint_dir, store.store_id) if store.checkpoint_dir else None
            versions = location.snapshot_versions() if location is not None else []
        except (OSError, StateStoreError) as exc:  # the location cannot be read: say why
            log_event(_log, "checkpoint_read_failed", logging.WARNING, store=store.store_id, error=str(exc))
            context.abort(grpc.StatusCode.UNAVAILABLE, f"checkpoint location of {store.store_id}: {exc}")
        if location is None or not versions:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no snapshot of {store.store_id} on {self._settings.identity}")
        snapshot_dir = location.snapshot_dir(versions[-1])
        try:
            manifest = read_manifest(snapshot_dir, location.fs)
        except StateStoreError as exc:
            context.abort(grpc.StatusCode.DATA_LOSS, str(exc))
        except OSError as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"reading {location.fs.uri(snapshot_dir)}: {exc}")
        log_event(
            _log,
            "bootstrap_serving",
            store=store.store_id,
            source="checkpoint_location",
            version=manifest.version,
            bytes=manifest.total_bytes,
            bytes_per_second=rate,
        )
        yield from stream_snapshot(snapshot_dir, manifest, rate, chunk, location.fs)


class PrimaryService(replication_pb2_grpc.PrimaryServicer):
    """The local primary's entry point: hand over a committed increment to be shipped."""

    def __init__(self, shipper: Shipper) -> None:
        self._shipper = shipper

    def Ship(self, request: replication_pb2.ShipCommand, context: grpc.ServicerContext) -> replication_pb2.ShipResult:
        """Ship one increment to its replica group; in sync mode wait for one replica's ack."""
        blob = request.increment
        problem = store_ref_problem(blob.store)
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"increment.{problem}")
        try:
            outcome = self._shipper.ship(
                normalized(blob.store),
                blob.data,
                request.sync,
                request.sync_timeout_seconds,
                rewrites_history=blob.rewrites_history,
            )
        except StateStoreError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"refused increment: {exc}")
        return replication_pb2.ShipResult(
            version=outcome.version,
            replicas=[replication_pb2.ReplicaAck(node_id=n, acked_version=v) for n, v in outcome.acked.items()],
            synced=outcome.synced,
            detail=outcome.detail,
        )

    def Release(self, request: common_pb2.StoreRef, context: grpc.ServicerContext) -> replication_pb2.ReleaseResult:
        """The local primary unloaded the partition: stop being its primary."""
        problem = store_ref_problem(request)
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem.removeprefix("store."))
        return replication_pb2.ReleaseResult(was_primary=self._shipper.release(normalized(request)))


def _version_problem(version: int, name: str) -> str:
    """Why `version` cannot be a store version ("" when it can): versions start at 1."""
    return f"{name} {version} is not a version (versions start at 1)" if version < 1 else ""
