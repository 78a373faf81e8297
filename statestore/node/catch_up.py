"""Where a replica finds the increments it lacks: the primary's node first, else the checkpoint location."""

from __future__ import annotations

import logging
from collections.abc import Generator

import grpc

from statestore import auth
from statestore.checkpoint_location import CheckpointLocation
from statestore.errors import StateStoreError
from statestore.increment import Increment, decode_increment
from statestore.logs import log_event
from statestore.node.increment_log import increment_checksum
from statestore.node.settings import GRPC_MESSAGE_OPTIONS
from statestore.rpc import common_pb2, replication_pb2, replication_pb2_grpc

_log = logging.getLogger("statestore.node.catch_up")

# A fetched increment and the checksum of its bytes (what a replica remembers of each version it applied).
Fetched = tuple[Increment, int]


def pull_from_node(
    address: str, store: common_pb2.StoreRef, from_version: int, to_version: int, timeout: float
) -> Generator[Fetched, None, None]:
    """Increments `from_version..to_version` pulled from the node at `address`, verified, in order.

    Stops quietly at the first version the node cannot give (or on a damaged one, or when the node is
    unreachable); the caller then turns to the next source.
    """
    if not address or from_version > to_version:
        return
    request = replication_pb2.PullRequest(store=store, from_version=from_version, to_version=to_version)
    with auth.channel(address, GRPC_MESSAGE_OPTIONS) as channel:
        stub = replication_pb2_grpc.ReplicationStub(channel)
        expected = from_version
        try:
            for blob in stub.Pull(request, timeout=timeout):
                increment = decode_increment(blob.data, f"increment {blob.version} pulled from {address}")
                if increment.version != expected or increment.store_id != store.store_id:
                    log_event(
                        _log,
                        "pull_unexpected",
                        logging.WARNING,
                        peer=address,
                        store=store.store_id,
                        expected=expected,
                        got=increment.version,
                    )
                    return
                yield increment, increment_checksum(blob.data)
                expected += 1
        except grpc.RpcError as exc:
            log_event(
                _log,
                "peer_unreachable",
                logging.WARNING,
                peer=address,
                call="Pull",
                store=store.store_id,
                code=exc.code().name,
                detail=exc.details(),
            )
        except StateStoreError as exc:
            log_event(_log, "pull_rejected", logging.WARNING, peer=address, store=store.store_id, error=str(exc))


def read_from_checkpoint_location(
    store: common_pb2.StoreRef, from_version: int, to_version: int
) -> Generator[Fetched, None, None]:
    """Increments `from_version..to_version` read (and verified) from the partition's checkpoint location.

    Stops at the first missing or damaged file, or when the location cannot be read (logged with the reason:
    an unsupported scheme, refused credentials, a missing bucket).
    """
    if not store.checkpoint_dir:
        return
    version = from_version
    try:
        location = CheckpointLocation(store.checkpoint_dir, store.store_id)
        while version <= to_version:
            increment, data = location.read_increment_and_bytes(version)
            yield increment, increment_checksum(data)
            version += 1
    except (OSError, StateStoreError) as exc:
        log_event(
            _log, "checkpoint_read_failed", logging.WARNING, store=store.store_id, version=version, error=str(exc)
        )


def increment_bytes_for_pull(location: CheckpointLocation, version: int) -> bytes | None:
    """The raw bytes of increment `version` in a checkpoint location, or None if absent or unreadable (logged
    with the reason)."""
    try:
        return location.fs.read_bytes(location.increment_file(version))
    except FileNotFoundError:
        return None
    except OSError as exc:
        log_event(
            _log, "checkpoint_read_failed", logging.WARNING, store=location.store_id, version=version, error=str(exc)
        )
        return None
