"""The increments a primary's node shipped: recent bytes (served to replicas that pull, bounded in bytes)
and a longer, bounded index of every version's size and checksum (lag in bytes, rewrite detection)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from itertools import islice

# Versions per partition whose size and checksum are remembered after their bytes were evicted; an entry
# costs a few dozen bytes.
DEFAULT_INDEXED_VERSIONS = 4096


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
        self._bytes = 0
        self._lock = threading.Lock()

    def add(self, partition: str, version: int, data: bytes) -> None:
        """Keep increment `version` of `partition`, evicting the oldest entries past the byte bound."""
        with self._lock:
            previous = self._entries.pop((partition, version), None)
            if previous is not None:
                self._bytes -= len(previous)
            self._entries[(partition, version)] = data
            self._bytes += len(data)
            while self._bytes > self._max_bytes and len(self._entries) > 1:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= len(evicted)
            index = self._index.setdefault(partition, OrderedDict())
            index.pop(version, None)
            index[version] = LoggedVersion(len(data), increment_checksum(data))
            while len(index) > self._max_indexed:
                index.popitem(last=False)

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
            index = self._index.get(partition, OrderedDict())
            for v in [v for v in index if v > version]:
                del index[v]
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
