"""Every setting of a state node, gathered in one typed place (documented in docs/node.md)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path

from statestore.node.provider_paths import ProviderPaths
from statestore.options import SharedMemory, StoreOptions, shared_memory

# SST files a replica keeps open (RocksDB's smallest bound: it keeps 10 of its 20 for SSTs); a replica is written,
# rarely read, so reopening a file is rare.
REPLICA_MAX_OPEN_FILES = 20
# Info logs a replica keeps: each reopen (ReplicaSet.settle) starts one.
REPLICA_KEPT_INFO_LOGS = 2
MIB = 1024 * 1024
# Where a launcher that cannot pass `--rack` (e.g. a sidecar's) may name the node's rack.
RACK_ENV = "STATESTORE_NODE_RACK"

# gRPC options shared by the node's server and its client channels: increments may exceed gRPC's 4 MiB
# default message size.
GRPC_MESSAGE_OPTIONS = [
    ("grpc.max_receive_message_length", 512 * MIB),
    ("grpc.max_send_message_length", 512 * MIB),
]


@dataclass(frozen=True)
class NodeSettings:
    """How a state node listens, stores, ships, catches up and bootstraps."""

    listen: str
    data_dir: Path
    controller: str | None = None
    # Identity in the controller's membership; defaults to the advertised address.
    node_id: str = ""
    # Address peers use to reach this node; defaults to `listen`.
    advertise: str = ""
    # With a set port in `listen`: how many following ports to try when it is taken.
    port_retries: int = 0
    # The node's rack, sent on Register and every heartbeat for placement; empty: the node is its own rack.
    rack: str = ""
    # The Spark executor whose state the node keeps (a sidecar's: its executor's id and host as Spark's
    # scheduler names them), so that the driver can steer a partition's task here; a node run as a service
    # learns them from its provider's first PROMOTE.
    executor_id: str = ""
    executor_host: str = ""
    heartbeat_interval: float = 0.5
    # Back-pressure: bytes shipped to one replica and not yet acked before `ship` waits.
    max_in_flight_bytes: int = 64 * MIB
    # How long `ship` waits for room before dropping that replica's backlog (it then catches up by pulling).
    backpressure_timeout: float = 1.0
    retry_initial_backoff: float = 0.05
    retry_max_backoff: float = 2.0
    sync_timeout: float = 10.0
    # Recent increments kept in memory to serve replicas' pulls (and to measure lag in bytes).
    increment_log_bytes: int = 64 * MIB
    # Out-of-order increments a replica keeps while it fills a gap.
    reorder_buffer_bytes: int = 64 * MIB
    # An empty replica this many versions behind bootstraps from a snapshot instead of pulling increments.
    bootstrap_min_gap: int = 16
    bootstrap_bytes_per_second: int = 64 * MIB
    bootstrap_chunk_bytes: int = 256 * 1024
    # After the controller demotes this node from a partition its provider still has open (a hand-over moved the
    # task away), increments shipped to it for that partition are refused this long while the provider's store is
    # awaited (Spark closes it at its next maintenance, then the node adopts it: DEMOTE), rather than bootstrapping a
    # replica from scratch meanwhile.
    adopt_wait_seconds: float = 60.0
    # Deadline of one call to a peer (pull, bootstrap, controller).
    peer_timeout: float = 10.0
    # A peer load (a provider here asks for a partition this node holds no replica of) streams the peer's
    # copy at up to this rate: the provider waits, so it is not throttled like a bootstrap; 0 is unthrottled.
    peer_fetch_bytes_per_second: int = 0
    store_write_buffer_mb: int = 8
    store_block_cache_mb: int = 8  # per replica, when memory_budget_mb is 0
    # RocksDB memory of all the node's replicas together: one block cache of this size with their write buffers
    # charged to it (statestore.options.SharedMemory); 0: each replica has a cache of its own (unbounded).
    memory_budget_mb: int = 128
    # Replicas whose stores the node keeps open at once (ReplicaSet.settle): each holds about 7 files, so at 96 a
    # node stays under a common limit of 1,024 open files however many replicas it holds; past it, a replica is
    # closed after its increment and opened again at its next (about 5 ms). 0: every replica stays open.
    max_open_replicas: int = 96
    # The directory the node's providers keep their stores beneath: the only place a local-channel frame may make
    # the node adopt a directory from (DEMOTE) or write a copy into (MATERIALIZE). Unset: the data dir's parent (a
    # sidecar's data dir is in its executor JVM's directory, beside the JVM's stores).
    provider_dir: Path | None = None
    # The host's copies directory of Spark's RocksDB provider's state files (docs/formats.md section 7), where the
    # node keeps the files peers ship it (statestore.node.file_replicas). Unset: the node keeps none.
    replica_files_dir: Path | None = None
    # The application's secret (statestore.auth): every call to this node must carry it, and the node's calls
    # carry it; "" accepts every call. Taken from the environment (STATESTORE_SECRET), never the command line.
    secret: str = field(default="", repr=False)

    @property
    def provider_paths(self) -> ProviderPaths:
        """The paths local-channel frames may name (statestore.node.provider_paths)."""
        return ProviderPaths(self.provider_dir or self.data_dir.absolute().parent, self.data_dir)

    @property
    def address(self) -> str:
        """The address peers reach this node at."""
        return self.advertise or self.listen

    @property
    def identity(self) -> str:
        """The node id."""
        return self.node_id or self.address

    def store_options(self, store_id: str) -> StoreOptions:
        """RocksDB settings of the replica of `store_id` (small: a node holds many of them).

        Its write buffer is 0.75x to 1.25x `store_write_buffer_mb`, fixed per store id. A query's partitions
        receive increments at about the same rate, so with equal buffers every replica on every node flushed in
        the same second, and their compactions, each rewriting a whole partition, started together: 1.05
        core-seconds of the nodes' RocksDB threads in one micro-batch of the migration bench's query, which ran
        1.59x its neighbours' median. Unequal buffers spread the flushes and compactions over different batches."""
        spread = zlib.crc32(store_id.encode()) / 2**32
        return StoreOptions(
            write_buffer_mb=self.store_write_buffer_mb * (0.75 + 0.5 * spread),
            block_cache_mb=self.store_block_cache_mb,
            shared=self.shared_memory,
            max_open_files=REPLICA_MAX_OPEN_FILES,
            keep_log_files=REPLICA_KEPT_INFO_LOGS,
        )

    @property
    def shared_memory(self) -> SharedMemory | None:
        """The RocksDB memory the node's replicas share (None: unbounded)."""
        return shared_memory(self.memory_budget_mb) if self.memory_budget_mb > 0 else None
