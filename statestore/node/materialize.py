"""Materializing a partition for the local provider: where the node's copy comes from, decided in one place.

The provider's load asks its node (local channel `MATERIALIZE`, docs/formats.md section 6) for the partition
at version `v`. The node answers with a RocksDB checkpoint written into the directory the provider names:

1. **replica**: of its own replica, if it holds one at `v` or below of a known lineage (hard links on the
   same file system: the cost does not grow with the state);
2. **peer**: else, if the provider allows it, of a peer's replica streamed over gRPC (`Replication.Bootstrap`
   with `replica_only`, every file's size and CRC-32 checked), from the live holder the controller names as
   freshest;
3. **none**: else nothing, and the provider restores from the checkpoint location.

The provider checks what it gets against the checkpoint location's lineage before using it; the node only
says what it wrote. The node never makes a load fail: every problem is an answer.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import grpc

from statestore import auth
from statestore.errors import StateStoreError
from statestore.faults.points import fault_point
from statestore.logs import log_event
from statestore.node.bootstrap import receive_snapshot
from statestore.node.local_channel import (
    MATERIALIZED_FAILED,
    MATERIALIZED_NONE,
    MATERIALIZED_OK,
    Materialize,
    Materialized,
)
from statestore.node.locate import locate
from statestore.node.replica import ReplicaSet
from statestore.node.settings import GRPC_MESSAGE_OPTIONS, NodeSettings
from statestore.rpc import common_pb2, control_pb2, replication_pb2, replication_pb2_grpc
from statestore.store import VersionedStore

_log = logging.getLogger("statestore.node.materialize")
SOURCE_REPLICA = 1
SOURCE_PEER = 2
# A peer copy is moved into the provider's directory only with at least this much of its deadline left, so
# that a provider that gave up (and restores from the checkpoint location) never finds it there.
_RENAME_MARGIN_SECONDS = 0.5
# Unthrottled, as gRPC's Bootstrap counts a rate of 0 as "the server's default".
_UNTHROTTLED = 1 << 62


class Materializer:
    """Serves the local provider's `MATERIALIZE` requests from this node's replicas, or a peer's."""

    def __init__(
        self, settings: NodeSettings, replicas: ReplicaSet, is_primary: Callable[[common_pb2.StoreRef], bool]
    ) -> None:
        self._settings = settings
        self._replicas = replicas
        self._is_primary = is_primary

    def materialize(self, store: common_pb2.StoreRef, request: Materialize) -> Materialized:
        """Write the node's copy of `store` at `request.version` or below into `request.target_dir`."""
        fault_point("materialize", store.store_id)
        started = time.monotonic()
        deadline = started + request.deadline_ms / 1000.0
        target = Path(request.target_dir)
        reasons = []
        if self._is_primary(store):
            reasons.append("this node is the partition's primary: its copy is its provider's own directory")
        else:
            answer = self._from_replica(store, request.version, target, deadline)
            if isinstance(answer, Materialized):
                return self._logged(store, request, answer, started)
            reasons.append(answer)
        if request.allow_peer:
            answer = self._from_peer(store, request.version, target, deadline)
            if isinstance(answer, Materialized):
                return self._logged(store, request, answer, started)
            reasons.append(answer)
        else:
            reasons.append("peer loads not allowed (peerFetch setting)")
        answer = Materialized(MATERIALIZED_NONE, 0, None, 0, "; ".join(reasons))
        return self._logged(store, request, answer, started)

    def _from_replica(
        self, store: common_pb2.StoreRef, version: int, target: Path, deadline: float
    ) -> Materialized | str:
        replica = self._replicas.get(store)
        if replica is None:
            return "no replica here"
        try:
            # Within the provider's deadline, less the time to answer: a replica busy with a catch-up or a bootstrap
            # (minutes at worst) would otherwise hold this frame's thread, and its checkpoint would land in a
            # directory the provider had given up on and deleted.
            wait = deadline - time.monotonic() - _RENAME_MARGIN_SECONDS
            held = replica.checkpoint_into(target, version, wait_seconds=wait)
        except StateStoreError as exc:
            shutil.rmtree(target, ignore_errors=True)
            return f"checkpoint of the replica failed: {exc}"
        if isinstance(held, str):
            return f"replica not usable: {held}"
        return Materialized(MATERIALIZED_OK, held[0], held[1], SOURCE_REPLICA, "")

    def _from_peer(self, store: common_pb2.StoreRef, version: int, target: Path, deadline: float) -> Materialized | str:
        holders = self._holders(store, version, deadline)
        if isinstance(holders, str):
            return holders
        why = []
        for holder in holders:
            answer = self._fetch(store, holder, version, target, deadline)
            if isinstance(answer, Materialized):
                return answer
            why.append(f"{holder.node.node_id}: {answer}")
        return "; ".join(why) or "no peer holds a replica at or below that version"

    def _holders(self, store: common_pb2.StoreRef, version: int, deadline: float) -> list[control_pb2.Holder] | str:
        """The live peers holding a replica at `version` or below, freshest first (the controller knows)."""
        reply = locate(self._settings, store, deadline)
        if isinstance(reply, str):
            return reply
        # At `version` or below, freshest first; then one version past it (its undo record takes it back, for a
        # batch Spark re-runs), before an older copy that would leave more increments to replay.
        usable = [
            h for h in reply.holders if h.node.node_id != self._settings.identity and 0 < h.version <= version + 1
        ]
        usable.sort(key=lambda h: (h.version != version, h.version > version, -h.version))
        return usable or "no peer holds a replica at or near that version"

    def _fetch(
        self, store: common_pb2.StoreRef, holder: control_pb2.Holder, version: int, target: Path, deadline: float
    ) -> Materialized | str:
        """Stream the holder's replica into a staging directory beside `target`, then move it there."""
        staging = target.parent / f".{target.name}.peer-{uuid.uuid4().hex[:8]}.tmp"
        request = replication_pb2.BootstrapRequest(
            store=store,
            bytes_per_second=self._settings.peer_fetch_bytes_per_second or _UNTHROTTLED,
            chunk_bytes=1 << 20,
            replica_only=True,
            at_most=version,
        )
        source = f"replica of {store.store_id} on {holder.node.node_id}"
        try:
            with auth.channel(holder.node.address, GRPC_MESSAGE_OPTIONS) as channel:
                chunks = replication_pb2_grpc.ReplicationStub(channel).Bootstrap(request, timeout=_left(deadline))
                manifest = receive_snapshot(chunks, staging, source)
            with VersionedStore.open(staging, store.store_id, self._settings.store_options(store.store_id)) as copy:
                got, lineage = copy.version, copy.lineage
            if got != manifest.version or lineage is None or got > version:
                raise StateStoreError(
                    f"{source}: holds version {got}, manifest says {manifest.version}, asked {version}"
                )
            if deadline - time.monotonic() < _RENAME_MARGIN_SECONDS:
                raise StateStoreError(f"{source}: arrived too late for the provider's deadline")
            os.rename(staging, target)
        except grpc.RpcError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            return f"{exc.code().name}: {exc.details()}"
        except (StateStoreError, OSError) as exc:
            shutil.rmtree(staging, ignore_errors=True)
            return str(exc)
        return Materialized(MATERIALIZED_OK, got, lineage, SOURCE_PEER, f"from {holder.node.node_id}")

    @staticmethod
    def _logged(store: common_pb2.StoreRef, request: Materialize, answer: Materialized, started: float) -> Materialized:
        fields = {
            "store": store.store_id,
            "checkpoint": store.checkpoint_dir,
            "asked": request.version,
            "millis": round((time.monotonic() - started) * 1000),
        }
        if answer.status == MATERIALIZED_OK:
            log_event(
                _log,
                "materialized",
                version=answer.version,
                source="replica" if answer.source == SOURCE_REPLICA else "peer",
                note=answer.message,
                **fields,
            )
        else:
            level = logging.WARNING if answer.status == MATERIALIZED_FAILED else logging.INFO
            log_event(_log, "not_materialized", level, why=answer.message, **fields)
        return answer


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.001)
