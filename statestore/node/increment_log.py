"""The increments a primary's node shipped: recent bytes (served to replicas that pull, bounded in bytes)
and a longer, bounded index of every version's size and checksum (lag in bytes, rewrite detection)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from itertools import islice

# Versions per partition whose size and checksum are remembered after their bytes were evicted. An entry costs
# about 250 bytes of Python objects: at 4096, a node primary of 200 partitions held 200 MB of index after 4096
# micro-batches. Spark re-runs only the newest batches (rewrite detection), and lag bytes past this many versions
# come from the checkpoint location's file sizes.
DEFAULT_INDEXED_VERSIONS = 256


def increment_checksum(data: bytes) -> int:
    """The CRC-32 stored in an increment's trailer (docs/formats.md section 3): its bytes' identity."""
    return int.from_bytes(data[-8:-4], "big")


@dataclass(frozen=True)
class LoggedVersion:
    """What the log remembers of one increment once its bytes may be gone."""

    size: int
    crc32: int


class IncrementLog:
    """Recent increments of every partition this node is primary of (keyed by `statestore.partition_key`),
    oldest evicted first."""

    def __init__(self, max_bytes: int, max_indexed_versions: int = DEFAULT_INDEXED_VERSIONS) -> None:
        self._max_bytes = max_bytes
        self._max_indexed = max_indexed_versions
        self._entries: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._index: dict[str, OrderedDict[int, LoggedVersion]] = {}
        # Partitions this node no longer leads: their index shrinks to the versions whose bytes are still kept (for
        # replicas that still pull), and goes with the last of them.
        self._retired: set[str] = set()
        self._bytes = 0
        self._lock = threading.Lock()

    def add(self, partition: str, version: int, data: bytes) -> None:
        """Keep increment `version` of `partition`, evicting the oldest entries past the byte bound."""
        with self._lock:
            self._retired.discard(partition)
            previous = self._entries.pop((partition, version), None)
            if previous is not None:
                self._bytes -= len(previous)
            self._entries[(partition, version)] = data
            self._bytes += len(data)
            while self._bytes > self._max_bytes and len(self._entries) > 1:
                (of, evicted_version), evicted = self._entries.popitem(last=False)
                self._bytes -= len(evicted)
                if of in self._retired:
                    self._unindex(of, [evicted_version])
            index = self._index.setdefault(partition, OrderedDict())
            index.pop(version, None)
            index[version] = LoggedVersion(len(data), increment_checksum(data))
            while len(index) > self._max_indexed:
                index.popitem(last=False)

    def retire(self, partition: str) -> None:
        """This node stopped leading `partition`: keep its index only for the versions whose bytes are kept."""
        with self._lock:
            index = self._index.get(partition)
            if index is None:
                return
            kept = {v for p, v in self._entries if p == partition}
            self._retired.add(partition)
            self._unindex(partition, [v for v in index if v not in kept])

    def _unindex(self, partition: str, versions: list[int]) -> None:
        """Drop `versions` from the partition's index, and the index once empty (lock held)."""
        index = self._index.get(partition)
        if index is None:
            return
        for version in versions:
            index.pop(version, None)
        if not index:
            del self._index[partition]
            self._retired.discard(partition)

    def get(self, partition: str, version: int) -> bytes | None:
        """The bytes of increment `version`, or None if not kept."""
        with self._lock:
            return self._entries.get((partition, version))

    def has(self, partition: str) -> bool:
        """Whether this node shipped any increment of `partition` that it still indexes."""
        with self._lock:
            return bool(self._index.get(partition))

    def known(self, partition: str, version: int) -> LoggedVersion | None:
        """Size and checksum of increment `version` if it is still indexed."""
        with self._lock:
            return self._index.get(partition, {}).get(version)

    def mean_size(self, partition: str, last: int = 16) -> int:
        """Mean size of the newest `last` increments of `partition` indexed (0 if none)."""
        with self._lock:
            sizes = [entry.size for entry in islice(reversed(self._index.get(partition, {}).values()), last)]
        return sum(sizes) // len(sizes) if sizes else 0

    def drop_after(self, partition: str, version: int) -> int:
        """Forget the increments of `partition` above `version` (an abandoned history); returns how many."""
        with self._lock:
            doomed = [key for key in self._entries if key[0] == partition and key[1] > version]
            for key in doomed:
                self._bytes -= len(self._entries.pop(key))
            self._unindex(partition, [v for v in self._index.get(partition, {}) if v > version])
            return len(doomed)

    def sizes_between(self, partition: str, after: int, upto: int, limit: int) -> tuple[int, list[int], int]:
        """Sizes of the increments with `after < version <= upto`: (bytes of the indexed ones, up to `limit`
        of the versions not indexed, how many are not indexed)."""
        with self._lock:
            index = self._index.get(partition, {})
            known = [entry.size for v, entry in index.items() if after < v <= upto]
            missing = max(upto - after, 0) - len(known)
            unknown = []
            if missing:
                v = after + 1
                while v <= upto and len(unknown) < limit:
                    if v not in index:
                        unknown.append(v)
                    v += 1
            return sum(known), unknown, missing
