"""Every RocksDB knob the engine sets, gathered in one typed place."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from rocksdict import BlockBasedOptions, Cache, DBCompressionType, Options, WriteBufferManager

# The newest block-based table format every supported Spark line's RocksDB reads (see rocksdb_options).
SST_FORMAT_VERSION = 5
# Memtable arena blocks of stores sharing a write buffer manager (RocksDB's default is 1 MiB).
BOUNDED_ARENA_BLOCK_BYTES = 64 * 1024


@dataclass(frozen=True)
class SharedMemory:
    """One block cache for many stores, with their write buffers charged to it by a write buffer manager (at most
    half of it): RocksDB flushes the largest memtables when they hold more, so the stores' RocksDB memory together
    stays near `budget_mb` (Spark's RocksDB provider's bounded mode, RocksDB's "cost memtable to block cache")."""

    budget_mb: int
    cache: Cache = field(compare=False, repr=False)
    write_buffers: WriteBufferManager = field(compare=False, repr=False)

    def usage_bytes(self) -> int:
        """RocksDB memory the stores hold now: cached blocks and, charged to the cache, their memtables."""
        return int(self.cache.get_usage())


@functools.cache
def shared_memory(budget_mb: int) -> SharedMemory:
    """The process's shared RocksDB memory of `budget_mb` MiB (one per budget: a node has one)."""
    budget = budget_mb * 1024 * 1024
    cache = Cache(budget)
    write_buffers = WriteBufferManager.new_write_buffer_manager_with_cache(budget // 2, False, cache)
    return SharedMemory(budget_mb, cache, write_buffers)


@dataclass(frozen=True)
class StoreOptions:
    """RocksDB settings of one store partition.

    The comparator is always RocksDB's default bytewise one (`raw_mode=True`), so the JVM provider opens
    the same directory (docs/formats.md section 2).
    """

    write_buffer_mb: float = 64
    block_cache_mb: int = 64
    lz4_compression: bool = True
    bloom_bits_per_key: float = 10.0
    max_background_jobs: int = 2
    # SST files kept open per store (-1: all of them). A node holds hundreds of replicas: a bound keeps its open
    # files from growing with each replica's files (RocksDB keeps at least 20 for a bound, 10 of them for SSTs).
    max_open_files: int = -1
    # Info logs kept (RocksDB's default is 1,000): every open starts a new one, and a node reopens replicas it
    # closed past its open-store budget at each of their increments.
    keep_log_files: int = 1000
    # L0 files before a compaction (RocksDB's default is 4); the provider uses the same (LocalStore.java says why).
    level0_compaction_trigger: int = 8
    # The local store is a cache of the checkpoint location, so its WAL need not be fsynced per commit;
    # the WAL still makes each commit's write batch atomic across a crash.
    sync_writes: bool = False
    # Set: the store's blocks and write buffers count against this budget shared with other stores (then
    # `block_cache_mb` is unused); None: a cache of `block_cache_mb` of its own and unbounded write buffers.
    shared: SharedMemory | None = None

    def rocksdb_options(self, create: bool) -> Options:
        """rocksdict Options for the database and each of its column families."""
        options = Options(raw_mode=True)
        options.create_if_missing(create)
        options.create_missing_column_families(True)
        options.set_write_buffer_size(int(self.write_buffer_mb * 1024 * 1024))
        options.set_max_background_jobs(self.max_background_jobs)
        options.set_max_open_files(self.max_open_files)
        options.set_keep_log_file_num(self.keep_log_files)
        options.set_level_zero_file_num_compaction_trigger(self.level0_compaction_trigger)
        if self.lz4_compression:
            options.set_compression_type(DBCompressionType.lz4())
        table = BlockBasedOptions()
        if self.shared is not None:
            table.set_block_cache(self.shared.cache)
            table.set_cache_index_and_filter_blocks(True)
            options.set_write_buffer_manager(self.shared.write_buffers)
            # The write buffer manager counts every written memtable's arena block as allocated: at RocksDB's
            # 1 MiB, a few hundred replicas' memtables were over the budget's half and every write flushed.
            options.set_arena_block_size(BOUNDED_ARENA_BLOCK_BYTES)
        else:
            table.set_block_cache(Cache(self.block_cache_mb * 1024 * 1024))
        table.set_bloom_filter(self.bloom_bits_per_key, False)
        # A replica is opened by the provider in the JVM of every supported Spark line: the oldest rocksdbjni among
        # them (8.3.2, Spark 3.5's) reads block-based tables up to format version 5 (6 came with RocksDB 8.6).
        table.set_format_version(SST_FORMAT_VERSION)
        options.set_block_based_table_factory(table)
        return options
