"""A snapshot streamed from a peer (statestore.node.bootstrap.receive_snapshot): files of one flat directory only.
A manifest naming a path outside it (a damaged or hostile peer) is refused before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from statestore.errors import CorruptFileError
from statestore.node.bootstrap import receive_snapshot
from statestore.rpc import replication_pb2


def _start(name: str) -> replication_pb2.SnapshotStart:
    """A snapshot manifest of one empty file, `name`."""
    file = replication_pb2.SnapshotFileInfo(name=name, size=0, crc32=0)
    return replication_pb2.SnapshotStart(store_id="0/1/default", version=3, total_bytes=0, files=[file])


@pytest.mark.parametrize("name", ["../outside", "sub/file", "..", "."])
def test_a_manifest_naming_a_path_outside_the_snapshot_directory_is_refused(tmp_path: Path, name: str) -> None:
    start = _start(name)
    destination = tmp_path / "staging" / "snapshot"
    destination.parent.mkdir()
    with pytest.raises(CorruptFileError, match="not a file of one directory"):
        receive_snapshot(iter([replication_pb2.SnapshotChunk(start=start)]), destination, "peer 127.0.0.1:1")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["staging"]


def test_an_empty_file_of_the_snapshot_is_written(tmp_path: Path) -> None:
    start = _start("LOCK")
    manifest = receive_snapshot(iter([replication_pb2.SnapshotChunk(start=start)]), tmp_path / "s", "peer")
    assert manifest.version == 3 and (tmp_path / "s" / "LOCK").is_file()


@pytest.mark.parametrize("name", ["../outside", "sub/file", "..", "", "MANIFEST.json"])
def test_a_snapshot_manifest_in_the_checkpoint_naming_a_file_outside_its_directory_is_refused(
    tmp_path: Path, name: str
) -> None:
    """The checkpoint location's manifest is read as the node's bootstrap stream is: a restore must not write
    outside the store's directory, whatever a damaged or hostile manifest says."""
    import json

    from statestore.snapshot import MANIFEST_NAME, SNAPSHOT_FORMAT, SNAPSHOT_FORMAT_VERSION, read_manifest

    snapshot = tmp_path / "7.snapshot"
    snapshot.mkdir()
    document = {"format": SNAPSHOT_FORMAT, "format_version": SNAPSHOT_FORMAT_VERSION, "store_id": "0/0/default",
                "version": 7, "files": [{"name": "000012.sst", "size": 1, "crc32": 0},
                                        {"name": name, "size": 1, "crc32": 0}]}  # fmt: skip
    (snapshot / MANIFEST_NAME).write_text(json.dumps(document))
    with pytest.raises(CorruptFileError, match="not a file of the snapshot"):
        read_manifest(snapshot)
