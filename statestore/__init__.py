"""A replicated, incrementally-checkpointed RocksDB state store for Spark Structured Streaming.

The engine: a versioned RocksDB store per state partition whose every commit yields an increment
(docs/formats.md), snapshots, and a checkpoint location that restores any retained version.
"""

import os as _os

# gRPC's fork handlers can make subprocess.Popen fail in a process that serves or calls gRPC (grpc/grpc#43055,
# grpcio >= 1.81): PySpark's gateway launch then dies with JAVA_GATEWAY_EXITED. No process of ours forks and
# goes on using gRPC in the child, so the handlers are not needed. Set before grpc loads.
_os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
# gRPC's C core otherwise prints informational lines ("skipping fork() handlers") on the user's console.
_os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from statestore.checkpoint_location import CheckpointLocation
from statestore.errors import (
    CorruptFileError,
    LineageMismatchError,
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
    "LineageMismatchError",
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
