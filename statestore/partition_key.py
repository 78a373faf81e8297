"""A state store partition's identity across queries and applications.

Spark names a store partition by `<operatorId>/<partitionId>/<storeName>`, which every query repeats, so the
store id alone collides as soon as two queries (or two runs in one directory) meet on a node or in the
controller. The partition's checkpoint location is what makes it unique; nodes and the controller key
everything they keep per partition by both.
"""

from __future__ import annotations

import re

from statestore.rpc import common_pb2

# `<checkpoint root>/state/<operatorId>/<partitionId>[/<storeName>]`, as Spark lays out a store's location.
_STORE_LOCATION = re.compile(r"^(?P<root>.*?)/state/\d+/\d+(?:/[^/]+)?/?$")


def partition_key(store: common_pb2.StoreRef) -> str:
    """The key of the partition `store` names: its store id and its checkpoint location."""
    return f"{store.store_id}@{store.checkpoint_dir}"


def query_root(checkpoint_dir: str) -> str:
    """The query's checkpoint root of a store partition's checkpoint location (the location itself when it
    does not follow Spark's layout); what tells two queries' partitions apart in a status table."""
    match = _STORE_LOCATION.match(checkpoint_dir)
    return match.group("root") if match else checkpoint_dir
