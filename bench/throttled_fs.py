"""A slow remote store for benchmarks: a FUSE file system that passes every call through to a backing directory and
holds reads and writes to an object store's pace (one shared bandwidth, and a first-byte latency on each open).

    python bench/throttled_fs.py BACKING MOUNTPOINT [--mb-per-second 50] [--first-byte-ms 30]

Runs in the foreground until SIGTERM or `fusermount -u MOUNTPOINT`. `bench/own_provider_bench.py --remote` puts the
checkpoint location on it: Spark reaches it through its plain `file:` scheme, so the run needs no Hadoop object-store
client (s3a is in no pyspark wheel, and Maven Central is unreachable here), yet every byte a load reads from the
checkpoint location pays what a download from an object store would. Needs /dev/fuse, libfuse and `mfusepy`
(`pip install -e '.[bench]'`).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import threading
import time
from pathlib import Path
from typing import Any


class Counters:
    """Bytes read and written through the file system, written to a JSON file a few times a second for the bench
    (`--stats`)."""

    def __init__(self) -> None:
        self.read_bytes = 0
        self.written_bytes = 0
        self._lock = threading.Lock()

    def add(self, read: int = 0, written: int = 0) -> None:
        with self._lock:
            self.read_bytes += read
            self.written_bytes += written

    def keep_writing(self, path: Path, every: float = 0.1) -> None:
        def loop() -> None:
            staging = path.with_suffix(".tmp")
            while True:
                staging.write_text(json.dumps({"read_bytes": self.read_bytes, "written_bytes": self.written_bytes}))
                os.replace(staging, path)
                time.sleep(every)

        threading.Thread(target=loop, name="stats", daemon=True).start()


class TokenBucket:
    """A bandwidth shared by every read and write: each takes its bytes from the bucket, waiting for them."""

    def __init__(self, bytes_per_second: float) -> None:
        self._rate = bytes_per_second
        self._lock = threading.Lock()
        self._next_free = time.monotonic()

    def take(self, n: int) -> None:
        """Wait until `n` bytes fit in the bandwidth after every earlier taker's."""
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next_free)
            self._next_free = start + n / self._rate
            wait = self._next_free - now
        if wait > 0:
            time.sleep(wait)


def operations(backing: Path, bucket: TokenBucket, first_byte_seconds: float, counters: Counters) -> Any:
    """The FUSE operations of a passthrough to `backing`, throttled by `bucket`, counted in `counters`."""
    import mfusepy as fuse

    class Throttled(fuse.Operations):
        use_ns = True  # utimens gets nanoseconds

        def _path(self, path: str) -> str:
            return str(backing) + path

        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            st = os.lstat(self._path(path))
            keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime", "st_mtime", "st_ctime")
            return {key: getattr(st, key) for key in keys}

        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", *os.listdir(self._path(path))]

        def access(self, path: str, amode: int) -> int:
            if not os.access(self._path(path), amode):
                raise fuse.FuseOSError(errno.EACCES)
            return 0

        def open(self, path: str, flags: int) -> int:
            if not flags & (os.O_WRONLY | os.O_RDWR):
                time.sleep(first_byte_seconds)  # an object store's first byte
            return os.open(self._path(path), flags)

        def create(self, path: str, mode: int, fi: Any = None) -> int:
            return os.open(self._path(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            data = os.pread(fh, size, offset)
            bucket.take(len(data))
            counters.add(read=len(data))
            return data

        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            bucket.take(len(data))
            counters.add(written=len(data))
            return os.pwrite(fh, data, offset)

        def truncate(self, path: str, length: int, fh: int | None = None) -> int:
            os.truncate(self._path(path), length)
            return 0

        def flush(self, path: str, fh: int) -> int:
            return 0

        def fsync(self, path: str, datasync: int, fh: int) -> int:
            os.fsync(fh)
            return 0

        def release(self, path: str, fh: int) -> int:
            os.close(fh)
            return 0

        def unlink(self, path: str) -> int:
            os.unlink(self._path(path))
            return 0

        def rename(self, old: str, new: str) -> int:
            os.replace(self._path(old), self._path(new))
            return 0

        def mkdir(self, path: str, mode: int) -> int:
            os.mkdir(self._path(path), mode)
            return 0

        def rmdir(self, path: str) -> int:
            os.rmdir(self._path(path))
            return 0

        def chmod(self, path: str, mode: int) -> int:
            os.chmod(self._path(path), mode)
            return 0

        def chown(self, path: str, uid: int, gid: int) -> int:
            os.chown(self._path(path), uid, gid)
            return 0

        def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
            os.utime(self._path(path), ns=times) if times else os.utime(self._path(path))
            return 0

        def statfs(self, path: str) -> dict[str, Any]:
            st = os.statvfs(self._path(path))
            keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag",
                    "f_frsize", "f_namemax")  # fmt: skip
            return {key: getattr(st, key) for key in keys}

    return Throttled()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("backing", type=Path)
    parser.add_argument("mountpoint", type=Path)
    parser.add_argument("--mb-per-second", type=float, default=50.0, help="bandwidth of reads and writes together")
    parser.add_argument("--first-byte-ms", type=float, default=30.0, help="latency of each open for reading")
    parser.add_argument("--stats", type=Path, help="keep the bytes read and written so far in this JSON file")
    args = parser.parse_args()
    import mfusepy as fuse

    args.backing.mkdir(parents=True, exist_ok=True)
    args.mountpoint.mkdir(parents=True, exist_ok=True)
    counters = Counters()
    if args.stats:
        counters.keep_writing(args.stats)
    bucket = TokenBucket(args.mb_per_second * 1e6)
    ops = operations(args.backing.resolve(), bucket, args.first_byte_ms / 1000, counters)
    # direct_io: every read reaches this process, none is served from the kernel's page cache (an object store
    # keeps no copy on the reading host either).
    fuse.FUSE(ops, str(args.mountpoint), foreground=True, nothreads=False, direct_io=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
