"""A state store partition's identity across queries and applications.

Spark names a store partition by `<operatorId>/<partitionId>/<storeName>`, which every query repeats, so the
store id alone collides as soon as two queries (or two runs in one directory) meet on a node or in the
controller. The partition's checkpoint location is what makes it unique; nodes and the controller key
everything they keep per partition by both.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlparse

from statestore.rpc import common_pb2

# `<checkpoint root>/state/<operatorId>/<partitionId>[/<storeName>]`, as Spark lays out a store's location.
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
