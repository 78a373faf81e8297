"""The provider's writes to a checkpoint location on the local file system (spark_provider/java_test/io/statestore/
spark/CheckpointWritesCheck.java, through the provider's CheckpointDir, without Spark).

Hadoop's local file system without its native library starts a `chmod` process for every file and directory it
creates; the provider writes Hadoop's stock `file:` file systems' files itself, with Hadoop's permissions (the
umask of `fs.permissions.umask-mode`, not the process's), and renames each over its target in one step. A `file:`
file system of the user's (`fs.file.impl`) still gets every write. Run here with no `chmod` on PATH: the stock
path needs none, and the user's file system, which Hadoop's code below it asks for one, fails naming it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import java_check

ENTRIES = {
    "state": "rwxr-xr-x dir",
    "state/0": "rwxr-xr-x dir",
    "state/0/3": "rwxr-xr-x dir",
    "state/0/3/1.increment": "rw-r--r-- 149",
    "state/0/3/1.snapshot": "rwxr-xr-x dir",
    "state/0/3/1.snapshot/000009.sst": "rw-r--r-- 3",
    "state/0/3/1.snapshot/CURRENT": "rw-r--r-- 16",
    "state/0/3/1.snapshot/MANIFEST.json": "rw-r--r-- 275",
}


@pytest.fixture(scope="module")
def check(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    argv = java_check(tmp_path_factory, "CheckpointWritesCheck", "256m")
    return [shutil.which(argv[0]) or argv[0], *argv[1:]]


def run(check: list[str], directory: Path, *args: str, path: str = "/nonexistent") -> subprocess.CompletedProcess:
    """The check on `directory`, with `path` as PATH and a process umask of 077."""
    return subprocess.run(
        [*check, str(directory), *args], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PATH": path}, preexec_fn=lambda: os.umask(0o077),
    )  # fmt: skip


def entries(stdout: str) -> dict[str, str]:
    found = {}
    for line in stdout.splitlines():
        if line.startswith("entry "):
            name, mode, size = line.removeprefix("entry ").rsplit(" ", 2)
            if name:
                found[name] = f"{mode} {size}"
    return found


def test_a_local_checkpoint_location_is_written_without_starting_a_process(check: list[str], tmp_path: Path) -> None:
    result = run(check, tmp_path / "checkpoint")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "file system org.apache.hadoop.hive.ql.io.ProxyLocalFileSystem" in result.stdout  # pyspark's file:
    assert entries(result.stdout) == ENTRIES  # Hadoop's permissions under a process umask of 077; no temporary left
    assert "read rewritten" in result.stdout  # the re-run's increment replaced the first
    assert "listing Listing[increments=[1], snapshots=[1]]" in result.stdout


def test_a_file_system_of_the_users_gets_every_write(check: list[str], tmp_path: Path) -> None:
    refused = run(check, tmp_path / "without-chmod", "custom")
    assert refused.returncode != 0
    assert 'Cannot run program "chmod"' in refused.stderr  # Hadoop's code under the user's file system asked for it
    written = run(check, tmp_path / "with-chmod", "custom", path=os.environ["PATH"])
    assert written.returncode == 0, written.stderr[-3000:]
    assert "file system io.statestore.spark.CheckpointWritesCheck$UsersLocalFileSystem" in written.stdout
    assert entries(written.stdout) == ENTRIES
    assert "read rewritten" in written.stdout
