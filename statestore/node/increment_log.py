"""The increments a primary's node shipped recently: served to replicas that pull, bounded in bytes."""

from __future__ import annotations

import threading
from collections import OrderedDict


class IncrementLog:
    """Recent increments of every partition this node is primary of, oldest evicted first."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def add(self, store_id: str, version: int, data: bytes) -> None:
        """Keep increment `version` of `store_id`, evicting the oldest entries beyond the byte bound."""
        with self._lock:
            previous = self._entries.pop((store_id, version), None)
            if previous is not None:
                self._bytes -= len(previous)
            self._entries[(store_id, version)] = data
            self._bytes += len(data)
            while self._bytes > self._max_bytes and len(self._entries) > 1:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= len(evicted)

    def get(self, store_id: str, version: int) -> bytes | None:
        """The bytes of increment `version`, or None if not kept."""
        with self._lock:
            return self._entries.get((store_id, version))

    def bytes_between(self, store_id: str, after: int, upto: int) -> int:
        """Bytes of the kept increments with `after < version <= upto` (the lag of a replica at `after`)."""
        with self._lock:
            return sum(len(self._entries.get((store_id, v), b"")) for v in range(after + 1, upto + 1))
