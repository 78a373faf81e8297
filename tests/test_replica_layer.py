"""The replica file layer for checkpoint locations of other schemes (ReplicaFilterFileSystem), driven without Spark
over Hadoop's raw local file system (spark_provider/java_test/io/statestore/spark/ReplicaLayerCheck.java):

- a load's copy of an SST no copy is kept of goes through the layer (counted as read from the checkpoint location),
  where Hadoop 3.4's `FileUtil.copy` opened it with the wrapped file system's own `openFile` builder, past the
  layer: nothing counted, no copy kept as it was read;
- a write Spark's object-store checkpoint manager cancels with `abort()` leaves no staging file behind (the layer's
  stream refused the abort, and Spark then never closed it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import java_check


@pytest.fixture(scope="module")
def layer_check(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return java_check(tmp_path_factory, "ReplicaLayerCheck", "256m")


def run(check: list[str], mode: str, tmp_path: Path) -> dict[str, str]:
    done = subprocess.run([*check, mode, str(tmp_path / "ck"), str(tmp_path / "copies")], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def test_a_loads_copy_of_an_sst_without_a_kept_copy_is_read_through_the_layer(
    layer_check: list[str], tmp_path: Path
) -> None:
    seen = run(layer_check, "copy-fallback", tmp_path)
    assert seen["copied_equal"] == "true", seen
    assert seen["counted"] == seen["size"], f"the SST's read went past the layer: {seen}"


def test_an_aborted_write_leaves_no_staged_copy(layer_check: list[str], tmp_path: Path) -> None:
    seen = run(layer_check, "abort", tmp_path)
    # The raw local file system cannot abort an upload: the layer passes the refusal on, after dropping its copy.
    assert seen == {"abort": "unsupported", "staging": "0"}, seen
