"""Work for many partitions on a few threads, each partition's work in the order it came: one replica link
carries every partition a primary's node ships to this node, and a partition that takes long (a catch-up, a
bootstrap, a rebuild after a history rewrite) must not hold up the others' increments behind it."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from statestore.logs import log_event

_log = logging.getLogger("statestore.node.partition_lanes")


class PartitionLanes:
    """Runs `submit(key, job)` jobs on at most `workers` threads: jobs of one key one after another, in order,
    jobs of different keys side by side."""

    def __init__(self, workers: int, name: str) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._lock = threading.Lock()
        self._queued: dict[str, deque[Callable[[], None]]] = {}  # a key is here while its lane runs

    def submit(self, key: str, job: Callable[[], None]) -> None:
        """Queue `job` behind the earlier jobs of `key`."""
        with self._lock:
            lane = self._queued.get(key)
            if lane is not None:
                lane.append(job)
                return
            self._queued[key] = deque([job])
        self._pool.submit(self._drain, key)

    def _drain(self, key: str) -> None:
        while True:
            with self._lock:
                lane = self._queued[key]
                if not lane:
                    del self._queued[key]
                    return
                job = lane.popleft()
            try:
                job()  # a job handles its own errors; one that raises anyway must not end its lane for good
            except Exception as exc:
                log_event(_log, "lane_job_failed", logging.ERROR, key=key, error=repr(exc))

    def shutdown(self) -> None:
        """Run what is queued, then stop the threads."""
        self._pool.shutdown(wait=True)
