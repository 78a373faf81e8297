"""A state store partition's identity across queries and applications.

Spark names a store partition by `<operatorId>/<partitionId>/<storeName>`, which every query repeats, so the
store id alone collides as soon as two queries (or two runs in one directory) meet on a node or in the
controller. The partition's checkpoint location is what makes it unique; nodes and the controller key
everything they keep per partition by both.
"""

from __future__ import annotations

import functools
import re
from urllib.parse import unquote, urlparse

from statestore.rpc import common_pb2

# `<checkpoint root>/state/<operatorId>/<partitionId>[/<storeName>]`, as Spark lays out a store's location.
_SPARK_STORE_ID = re.compile(r"^(?P<operator>\d+)/(?P<partition>\d+)/.+$")
_STORE_LOCATION = re.compile(r"^(?P<root>.*?)/state/\d+/\d+(?:/[^/]+)?/?$")


def normalized_checkpoint_dir(checkpoint_dir: str) -> str:
    """The form every entry point stores a checkpoint location in: a local path for a `file:` URI (as Hadoop
    names the provider's checkpoint location), without a trailing slash; other schemes as given."""
    if checkpoint_dir.startswith("file:"):
        checkpoint_dir = unquote(urlparse(checkpoint_dir).path)
    return checkpoint_dir.rstrip("/") or checkpoint_dir


def normalized(store: common_pb2.StoreRef) -> common_pb2.StoreRef:
    """`store` with its checkpoint location normalized (what a node keys and forwards)."""
    return common_pb2.StoreRef(store_id=store.store_id, checkpoint_dir=normalized_checkpoint_dir(store.checkpoint_dir))


def partition_key(store: common_pb2.StoreRef) -> str:
    """The key of the partition `store` names: its store id and its checkpoint location."""
    return f"{store.store_id}@{store.checkpoint_dir}"


def query_root(checkpoint_dir: str) -> str:
    """The query's checkpoint root of a store partition's checkpoint location (the location itself when it
    does not follow Spark's layout); what tells two queries' partitions apart in a status table."""
    match = _STORE_LOCATION.match(checkpoint_dir)
    return match.group("root") if match else checkpoint_dir


def task_partition_key(store: common_pb2.StoreRef) -> str:
    """The key of the Spark task partition a store partition belongs to: its query's checkpoint root, operator
    and partition, without the store name. The stores of one task partition (a stream-stream join's four) are
    loaded by one task, so they share one replica group and fail over together. A store id that does not follow
    Spark's `<operatorId>/<partitionId>/<storeName>` is a task partition of its own."""
    return _task_key(store.store_id, store.checkpoint_dir)


def task_partition_key_of(key: str) -> str:
    """`task_partition_key` of the store partition whose `partition_key` is `key`."""
    store_id, _, checkpoint_dir = key.partition("@")
    return _task_key(store_id, checkpoint_dir)


@functools.lru_cache(maxsize=1 << 16)
def _task_key(store_id: str, checkpoint_dir: str) -> str:
    # Cached: the controller asks it of every partition a heartbeat or a re-plan touches (two regular expressions).
    match = _SPARK_STORE_ID.match(store_id)
    if match is None:
        return f"{store_id}@{checkpoint_dir}"
    return f"{match.group('operator')}/{match.group('partition')}@{query_root(checkpoint_dir)}"


# Longest store id and checkpoint location accepted from a peer or a local client (Spark's are far shorter).
MAX_STORE_ID_CHARS = 1024
MAX_CHECKPOINT_DIR_CHARS = 4096


def store_ref_problem(store: common_pb2.StoreRef) -> str:
    """Why `store`, as a request names it, names no store partition ("" when it may): a store id is required,
    and neither it nor the checkpoint location may hold a NUL byte or exceed its length bound."""
    if not store.store_id:
        return "store.store_id is required"
    for name, value, bound in (
        ("store_id", store.store_id, MAX_STORE_ID_CHARS),
        ("checkpoint_dir", store.checkpoint_dir, MAX_CHECKPOINT_DIR_CHARS),
    ):
        if "\x00" in value:
            return f"store.{name} {value!r} holds a NUL byte"
        if len(value) > bound:
            return f"store.{name} is {len(value)} characters long, over {bound}"
    return ""
