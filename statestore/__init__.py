"""A replicated, incrementally-checkpointed RocksDB state store for Spark Structured Streaming.

The engine: a versioned RocksDB store per state partition whose every commit yields an increment
(docs/formats.md), snapshots, and a checkpoint location that restores any retained version.
"""

from statestore.checkpoint_location import CheckpointLocation
from statestore.errors import (
    CorruptFileError,
    MissingCheckpointFileError,
    StateStoreError,
    StoreIdentityError,
    StoreWriteError,
    UnknownColumnFamilyError,
    UnsupportedFormatError,
    VersionMismatchError,
)
from statestore.increment import Increment, Op, decode_increment, encode_increment, read_increment
from statestore.options import StoreOptions
from statestore.store import DEFAULT_COLUMN_FAMILY, VersionedStore

__all__ = [
    "DEFAULT_COLUMN_FAMILY",
    "CheckpointLocation",
    "CorruptFileError",
    "Increment",
    "MissingCheckpointFileError",
    "Op",
    "StateStoreError",
    "StoreIdentityError",
    "StoreOptions",
    "StoreWriteError",
    "UnknownColumnFamilyError",
    "UnsupportedFormatError",
    "VersionMismatchError",
    "VersionedStore",
    "decode_increment",
    "encode_increment",
    "read_increment",
]
