"""The host's copies directory is written by the state node (shipped copies, statestore/node/host_copies.py) and by
the executors' JVMs (their own writes, ReplicaFiles.java). Replacing a copy and its index entry are two renames;
two writers of one name (a zombie task attempt, a shipment landing as the host's executor rewrites the file) could
leave one's bytes under the other's index entry, and the load serving it fails its checksum. Both sides replace
the pair under one host lock: these tests check that it excludes writers within the node and across the two
languages."""

from __future__ import annotations

import fcntl
import itertools
import os
import subprocess
import threading
import zlib
from pathlib import Path

import pytest
from conftest import java_check

from statestore.node.host_copies import HOST_LOCK_NAME, FileCopyError, HostCopies

CHECKPOINT_PATH = "/ckpt/state/0/3/7.changelog"


def test_concurrent_writers_of_one_name_never_mix_a_copy_and_its_index(tmp_path: Path) -> None:
    copies = HostCopies(tmp_path / "copies", "node-a")
    rounds, writers = 150, 4
    contents = [bytes([w]) * (1000 + w) for w in range(writers)]
    mixed: list[str] = []

    writes = itertools.count(1)
    kept: list[int] = []

    def write(content: bytes) -> None:
        for _ in range(rounds):
            try:
                # Each a later write of the file than the last begun; one that lands after a later one is refused.
                copies.write(CHECKPOINT_PATH, "7.changelog", len(content), zlib.crc32(content), [content],
                             modified_ms=next(writes))  # fmt: skip
                kept.append(1)
            except FileCopyError:
                continue

    def check() -> None:
        for _ in range(rounds * writers):
            entry = copies.entry(CHECKPOINT_PATH, "7.changelog")
            path = copies.copy_path(CHECKPOINT_PATH, "7.changelog")
            with copies._host_lock():  # a reader sees a settled pair
                entry = copies.entry(CHECKPOINT_PATH, "7.changelog")
                data = path.read_bytes() if path.exists() else None
            if entry is not None and data is not None and (entry.size, entry.crc32) != (len(data), zlib.crc32(data)):
                mixed.append(f"index says {entry.size} bytes, the copy holds {len(data)}")

    threads = [threading.Thread(target=write, args=(c,)) for c in contents] + [threading.Thread(target=check)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not mixed, mixed[:3]
    assert len(kept) > rounds  # the writers did overlap: most writes were kept
    entry = copies.entry(CHECKPOINT_PATH, "7.changelog")
    data = copies.copy_path(CHECKPOINT_PATH, "7.changelog").read_bytes()
    assert entry is not None and (entry.size, entry.crc32) == (len(data), zlib.crc32(data))


def test_the_nodes_lock_and_the_jvms_lock_exclude_each_other(tmp_path: Path, tmp_path_factory) -> None:
    if not __import__("shutil").which("javac"):
        pytest.skip("needs a JDK")
    directory = tmp_path / "copies"
    directory.mkdir()
    java = subprocess.Popen([*java_check(tmp_path_factory, "HostLockCheck", "64m"), str(directory)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert java.stdout.readline().strip() == "locked"
        fd = os.open(directory / HOST_LOCK_NAME, os.O_WRONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what HostCopies takes, without waiting
            java.stdin.write("release\n")
            java.stdin.flush()
            assert java.stdout.readline().strip() == "released"
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free now
        finally:
            os.close(fd)
    finally:
        java.kill()
        java.wait()
