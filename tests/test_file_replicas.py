"""File-level replicas of partitions on Spark's own RocksDB provider (statestore.node.file_replicas): a node told of
its host's state file copies (FILE_KEPT on the local channel, as the executor's checkpoint file layer sends it)
reports itself the partition's primary, the controller places its replica group, and the copies land in the
group's hosts' copies directories in the format the Java layer serves (docs/formats.md section 7). Real controller
and node processes over gRPC; the copies directory's format is checked against Java's own naming."""

from __future__ import annotations

import os
import socket
import time
import zlib
from pathlib import Path

import pytest
from test_node_harness import running_cluster, wait_until

from statestore.contract.local_channel_frames import (
    REPLY,
    SOURCE_CHECKPOINT,
    SOURCE_REPLICA,
    STATUS_ACCEPTED,
    FetchFiles,
    FileKept,
    FileRead,
    decode_reply,
    encode_fetch_files,
    encode_file_kept,
    encode_file_read,
)
from statestore.controller.status import describe_load
from statestore.node.host_copies import FileCopyError, HostCopies, copy_name, state_file_version
from statestore.node.local_channel import read_frame

STORE_ID = "0/3/default"


def keep_like_the_executor(copies: Path, checkpoint_path: str, name: str, data: bytes, modified_ms: int = 0) -> Path:
    """A copy and its index entry as the executor's JVM writes them (ReplicaFiles.java): three lines, and the
    checkpoint file's modification time when known."""
    copies.mkdir(parents=True, exist_ok=True)
    copy = copies / copy_name(checkpoint_path, name)
    copy.write_bytes(data)
    modified = f"modified {modified_ms}\n" if modified_ms else ""
    Path(f"{copy}.index").write_text(f"{checkpoint_path}\n{len(data)}\n{zlib.crc32(data)}\n{modified}")
    return copy


def modified_ms(path: Path) -> int:
    """A file's modification time in ms, as Hadoop's local file system reports it."""
    return path.stat().st_mtime_ns // 1_000_000


def tell_node(sock: Path, message: FileKept | FileRead | FetchFiles) -> str:
    """Send one FILE_KEPT, FILE_READ or FETCH_FILES on the node's local channel and return its REPLY's note."""
    encode = {FileKept: encode_file_kept, FileRead: encode_file_read, FetchFiles: encode_fetch_files}[type(message)]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(20)
        conn.connect(str(sock))
        conn.sendall(encode(message))  # type: ignore[operator]
        frame = read_frame(conn)
    assert frame is not None and frame[0] == REPLY
    reply = decode_reply(frame[1])
    assert reply.status == STATUS_ACCEPTED, reply.message
    return reply.message


def test_copy_names_and_versions_follow_the_java_layer() -> None:
    # Produced by Java's UUID.nameUUIDFromBytes, as ReplicaFiles.java names copies.
    assert copy_name("/tmp/ckpt/state/0/3/2.changelog", "2.changelog") == "bb38a2748938345c-2.changelog"
    assert (
        copy_name("/data/q1/state/1/17/SSTs/000008-5f0c.sst", "SSTs/000008-5f0c.sst")
        == "caeb70ea7b6a3c6c-SSTs_000008-5f0c.sst"
    )
    assert state_file_version("12.changelog") == 12
    assert state_file_version("7_0f3c9a2e-1b2c-4d5e-8f90-123456789abc.zip") == 7
    assert state_file_version("SSTs/000008-5f0c.sst") == 0
    assert state_file_version("../12.changelog") is None
    assert state_file_version("metadata") is None


def test_a_shipped_copy_is_checked_and_never_replaces_the_hosts_own(tmp_path: Path) -> None:
    copies = HostCopies(tmp_path / "copies", "node-b")
    path = "/ckpt/state/0/3/4.changelog"
    data = b"changelog bytes" * 100
    with pytest.raises(FileCopyError, match="arrived, not"):
        copies.write(path, "4.changelog", len(data), zlib.crc32(data) ^ 1, [data])
    assert not list((tmp_path / "copies").iterdir()), "a refused file leaves nothing behind"
    with pytest.raises(FileCopyError, match="not the name of a state file"):
        copies.write("/ckpt/state/0/3/../x", "../x", 1, 0, [b"x"])
    assert copies.write(path, "4.changelog", len(data), zlib.crc32(data), iter([data[:700], data[700:]])).startswith(
        "kept"
    )
    entry = copies.entry(path, "4.changelog")
    assert entry is not None and entry.kept_by_node == "node-b" and entry.size == len(data)
    assert copies.copy_path(path, "4.changelog").read_bytes() == data
    assert copies.write(path, "4.changelog", len(data), zlib.crc32(data), iter([data])) == "already held"

    # The host's executor rewrote the file (a re-run batch): its copy wins over a shipment not known to be later.
    own = b"rewritten here" * 90
    keep_like_the_executor(tmp_path / "copies", path, "4.changelog", own, modified_ms=1_700_000_005_000)
    with pytest.raises(FileCopyError, match="wrote its own copy"):
        copies.write(path, "4.changelog", len(data), zlib.crc32(data), iter([data]))
    with pytest.raises(FileCopyError, match="wrote its own copy"):  # a late shipment of an earlier write
        copies.write(path, "4.changelog", len(data), zlib.crc32(data), iter([data]), modified_ms=1_700_000_001_000)
    assert not copies.delete_shipped(path, "4.changelog")
    assert copies.copy_path(path, "4.changelog").read_bytes() == own

    # The batch ran again on another host, which rewrote the name later: its shipment replaces the stale copy.
    again = b"rewritten there" * 84
    done = copies.write(path, "4.changelog", len(again), zlib.crc32(again), iter([again]),
                        store=("0/3/default", "/ckpt/state"), modified_ms=1_700_000_009_000)  # fmt: skip
    assert done.startswith("kept"), done
    entry = copies.entry(path, "4.changelog")
    assert entry is not None and (entry.kept_by_node, entry.modified_ms) == ("node-b", 1_700_000_009_000)
    with pytest.raises(FileCopyError, match="a later write"):  # the earlier primary's shipment, arriving late
        copies.write(path, "4.changelog", len(data), zlib.crc32(data), iter([data]), modified_ms=1_700_000_001_000)
    assert entry.store == ("0/3/default", "/ckpt/state")
    assert copies.copy_path(path, "4.changelog").read_bytes() == again
    # The same bytes written once more (a later write, same content): not held as of that write, so kept again
    # with the later time, which the Java side compares with the checkpoint file's.
    assert not copies.holds(path, "4.changelog", len(again), zlib.crc32(again), 1_700_000_012_000)
    copies.write(path, "4.changelog", len(again), zlib.crc32(again), iter([again]), modified_ms=1_700_000_012_000)
    assert copies.entry(path, "4.changelog").modified_ms == 1_700_000_012_000  # type: ignore[union-attr]


def test_leftovers_of_writers_killed_mid_write_are_swept_once_old(tmp_path: Path) -> None:
    """An executor killed while it copied a state file leaves its staging file; one killed between a copy's rename
    and its index leaves a copy nothing finds. Both go once an hour old; a young one may be a write under way in
    another process of the host, and a copy with its index stays."""
    copies = HostCopies(tmp_path / "copies", "node-b")
    path = "/ckpt/state/0/3/4.changelog"
    data = b"changelog bytes" * 100
    copies.write(path, "4.changelog", len(data), zlib.crc32(data), [data])
    directory = tmp_path / "copies"
    old_staging = directory / ".0123456789abcdef-5.changelog.1b2c3d4e-0000-4000-8000-000000000000.tmp"
    young_staging = directory / ".0123456789abcdef-6.changelog.1b2c3d4e-0000-4000-8000-000000000001.tmp"
    orphan = directory / "0123456789abcdef-7.changelog"
    for leftover in (old_staging, young_staging, orphan):
        leftover.write_bytes(b"partial")
    hours_ago = time.time() - 2 * 3600
    for aged in (old_staging, orphan, copies.copy_path(path, "4.changelog")):
        os.utime(aged, (hours_ago, hours_ago))
    assert copies.sweep_leftovers() == 2
    assert not old_staging.exists() and not orphan.exists() and young_staging.exists()
    assert copies.copy_path(path, "4.changelog").read_bytes() == data and copies.entry(path, "4.changelog")


def test_files_a_node_is_told_of_reach_the_replica_groups_host(tmp_path: Path) -> None:
    names = ("a", "b", "c")
    extra = {n: ("--local-socket", str(tmp_path / f"{n}.sock"), "--replica-files-dir", str(tmp_path / f"{n}-copies"))
             for n in names}  # fmt: skip
    partition = tmp_path / "ckpt" / "state" / "0" / "3"
    files = {
        "SSTs/000008-5f0c.sst": b"sst" * 5000,
        "1.changelog": b"one" * 300,
        "2.changelog": b"two" * 310,
        "2.zip": b"zip" * 2000,
    }
    with running_cluster(tmp_path, names, q=1, extra=extra) as cluster:
        for name, data in files.items():
            checkpoint_file = partition / name
            checkpoint_file.parent.mkdir(parents=True, exist_ok=True)
            checkpoint_file.write_bytes(data)
            copy = keep_like_the_executor(tmp_path / "a-copies", str(checkpoint_file), name, data)
            note = tell_node(
                tmp_path / "a.sock",
                FileKept(STORE_ID, str(partition), str(checkpoint_file), name, state_file_version(name) or 0,
                         len(data), zlib.crc32(data), str(copy), "3f1c6a53-8c2e-4d0b-9a41-6f0e2d7b5c10",
                         f"file:{tmp_path}/ckpt/state", "1", "127.0.0.1", modified_ms(checkpoint_file)),
            )  # fmt: skip
            assert note.startswith(("shipping to", "no replica group yet")), note
        # What the load before those writes read, and from where: the partition's load report in status.
        for name, size, source in (("2.zip", 6000, SOURCE_REPLICA), ("SSTs/000008-5f0c.sst", 15000, SOURCE_REPLICA),
                                   ("3.changelog", 930, SOURCE_CHECKPOINT)):  # fmt: skip
            version = state_file_version(name) or 0
            read = FileRead(STORE_ID, str(partition), name, version, size, source)
            assert tell_node(tmp_path / "a.sock", read) == "counted"

        def replica_with_version_2() -> str | None:
            for p in cluster.status().partitions:
                if p.store.store_id == STORE_ID and p.primary_node == "a":
                    held = [r.node_id for r in p.replicas if r.version_held == 2]
                    return held[0] if held else None
            return None

        replica = wait_until(replica_with_version_2, 30, "a replica holding version 2 of the file partition")
        other = next(n for n in ("b", "c") if n != replica)
        peer = HostCopies(tmp_path / f"{replica}-copies", replica)
        for name, data in files.items():
            path = str(partition / name)
            wait_until(lambda p=path, n=name: peer.entry(p, n) is not None, 20, f"{name} on {replica}'s host")
            assert peer.copy_path(path, name).read_bytes() == data
            entry = peer.entry(path, name)
            assert entry is not None
            assert (entry.size, entry.crc32, entry.kept_by_node) == (len(data), zlib.crc32(data), replica)
            assert entry.modified_ms == modified_ms(partition / name)  # what the Java side checks at a load
        assert not (tmp_path / f"{other}-copies").exists() or not list((tmp_path / f"{other}-copies").iterdir())

        # The partition's task runs on the third host, which holds none of its files (Real-Time Mode, a steer that
        # did not hold): its load misses 2.zip, and that host's node fetches the partition's files from the replica.
        note = tell_node(tmp_path / f"{other}.sock", FetchFiles(STORE_ID, str(partition), "2.zip", 2, 10_000))
        assert note.startswith(f"fetched 3 files ({sum(len(d) for n, d in files.items() if n != '1.changelog')} "
                               f"bytes) from {replica}"), note  # fmt: skip
        fetched = HostCopies(tmp_path / f"{other}-copies", other)
        for name, data in files.items():
            entry = fetched.entry(str(partition / name), name)
            if name == "1.changelog":  # older than the snapshot the load asked for first
                assert entry is None
                continue
            assert entry is not None and fetched.copy_path(str(partition / name), name).read_bytes() == data
            assert (entry.size, entry.crc32, entry.modified_ms) == (len(data), zlib.crc32(data),
                                                                    modified_ms(partition / name))  # fmt: skip
        # The load's next miss gets that fetch's answer; nothing is fetched twice.
        again = tell_node(tmp_path / f"{other}.sock", FetchFiles(STORE_ID, str(partition), "3.changelog", 3, 10_000))
        assert again.startswith("fetched ") and " s ago: fetched 3 files" in again, again
        assert cluster.processes[other].log().count('"file_partition_fetched"') == 1
        unknown = FetchFiles("0/9/default", str(partition.parent / "9"), "1.changelog", 1, 10_000)
        nobody = tell_node(tmp_path / f"{other}.sock", unknown)
        assert nobody == "no peer holds files of it", nobody
        def load_reported() -> object:
            status = next(p for p in cluster.status().partitions if p.store.store_id == STORE_ID)
            return status if status.last_load.bytes_replica_files else None

        status = wait_until(load_reported, 20, "the partition's load report in status")  # it comes with a heartbeat
        assert status.primary_node == "a"
        load = status.last_load
        assert (load.bytes_replica_files, load.bytes_checkpoint, load.bytes_local_files) == (21000, 930, 0)
        assert (load.source, load.from_version, load.versions_applied) == ("replica files", 2, 1)
        assert describe_load(load) == "replica files 0.0 MiB, checkpoint 0.0 MiB v2+1"

        # The replica's node restarts (same node id and host directory): it finds the copies it kept again.
        cluster.processes[replica].kill9()
        cluster.start_node(replica, *extra[replica])
        wait_until(lambda: '"file_replicas_recovered"' in cluster.processes[replica].log(), 20,
                   f"{replica} to find the copies it kept before its restart")  # fmt: skip
        assert '"files": 4' in cluster.processes[replica].log(), cluster.processes[replica].log()
        wait_until(lambda: cluster.held(replica, STORE_ID) == 2, 30, f"{replica}'s held version 2 after its restart")

        # What the recovery is for: the node cleans up after the files it held. Spark's retention deletes
        # 1.changelog from the checkpoint; when the next snapshot arrives, its shipped copy goes too.
        (partition / "1.changelog").unlink()
        zip3 = b"zip3" * 1000
        (partition / "3.zip").write_bytes(zip3)
        copy = keep_like_the_executor(tmp_path / "a-copies", str(partition / "3.zip"), "3.zip", zip3)
        tell_node(tmp_path / "a.sock", FileKept(STORE_ID, str(partition), str(partition / "3.zip"), "3.zip", 3,
                                                len(zip3), zlib.crc32(zip3), str(copy), "", "", "", "",
                                                modified_ms(partition / "3.zip")))  # fmt: skip
        wait_until(lambda: peer.entry(str(partition / "3.zip"), "3.zip") is not None, 20, f"3.zip on {replica}'s host")
        wait_until(lambda: peer.entry(str(partition / "1.changelog"), "1.changelog") is None, 20,
                   f"the copy of the deleted 1.changelog to go from {replica}'s host")  # fmt: skip
        assert peer.entry(str(partition / "2.changelog"), "2.changelog") is not None


@pytest.mark.parametrize("missed", [2, 3, 1])
def test_a_peer_sends_a_partitions_files_in_load_order_and_leaves_out_what_the_asker_holds(
    tmp_path: Path, missed: int
) -> None:
    """The asker missed a file of version `missed` (a snapshot, or with checkpoint format 2 first the newest
    changelog): the peer sends the files a load of it reads, from the newest snapshot at or below it on (a CI run
    of the Real-Time Mode test: a load missed changelog 5, got 5 on, and read snapshot 4 from the checkpoint)."""
    from statestore.node.file_replicas import FileReplicas
    from statestore.node.settings import NodeSettings
    from statestore.rpc import common_pb2, replication_pb2

    partition = tmp_path / "ckpt" / "state" / "0" / "3"
    files = {"SSTs/000008-5f0c.sst": b"sst8" * 900, "SSTs/000011-77aa.sst": b"sst11" * 700, "2.zip": b"zip" * 500,
             "1.changelog": b"one" * 40, "2.changelog": b"two" * 41, "3.changelog": b"three" * 42}  # fmt: skip
    copies = tmp_path / "b" / "statestore-replica-files"
    for name, data in files.items():
        keep_like_the_executor(copies, str(partition / name), name, data, modified_ms=1_700_000_000_000)
    settings = NodeSettings(listen="127.0.0.1:0", data_dir=tmp_path / "b-data", node_id="b",
                            replica_files_dir=copies)  # fmt: skip
    replicas = FileReplicas(settings, lambda: None)
    try:
        store = common_pb2.StoreRef(store_id=STORE_ID, checkpoint_dir=str(partition))
        request = replication_pb2.FilesRequest(store=store, from_version=missed, held_ssts=["SSTs/000008-5f0c.sst"])
        sent: list[tuple[str, bytes]] = []
        for chunk in replicas.send_files(request):
            if chunk.HasField("header"):
                header = chunk.header
                assert (header.size, header.crc32, header.modified_ms) == (
                    len(files[header.name]), zlib.crc32(files[header.name]), 1_700_000_000_000)
                sent.append((header.name, b""))
            sent[-1] = (sent[-1][0], sent[-1][1] + chunk.data)
    finally:
        replicas.close()
    # The SST the asker holds is left out, and from 2 or 3 the changelog older than snapshot 2; below any snapshot
    # a load replays every changelog.
    older = ["1.changelog"] if missed < 2 else []
    assert [name for name, _ in sent] == ["SSTs/000011-77aa.sst", "2.zip", *older, "2.changelog", "3.changelog"]
    assert all(data == files[name] for name, data in sent)


def test_a_file_refused_by_a_replica_that_still_claims_the_partition_reaches_it_once_that_claim_ends(
    tmp_path: Path,
) -> None:
    """The partition's task moved from host a to host b (Real-Time Mode runs it wherever a slot is free): b's node
    ships the files b's executor keeps to a, whose node still claims the partition until the controller demotes it
    at its next heartbeat. a refuses while it claims; b sends again, and the file reaches a (a CI run of the
    Real-Time Mode test: a snapshot's SST refused so, never sent again, was read from the checkpoint location)."""
    names = ("a", "b")
    extra = {n: ("--local-socket", str(tmp_path / f"{n}.sock"), "--replica-files-dir", str(tmp_path / f"{n}-copies"))
             for n in names}  # fmt: skip
    partition = tmp_path / "ckpt" / "state" / "0" / "3"
    partition.mkdir(parents=True)

    def keep(node: str, name: str, data: bytes, executor: str) -> None:
        checkpoint_file = partition / name
        checkpoint_file.parent.mkdir(parents=True, exist_ok=True)
        checkpoint_file.write_bytes(data)
        copy = keep_like_the_executor(tmp_path / f"{node}-copies", str(checkpoint_file), name, data)
        kept = FileKept(STORE_ID, str(partition), str(checkpoint_file), name, state_file_version(name) or 0,
                        len(data), zlib.crc32(data), str(copy), "3f1c6a53-8c2e-4d0b-9a41-6f0e2d7b5c10",
                        f"file:{tmp_path}/ckpt/state", executor, "127.0.0.1", modified_ms(checkpoint_file))  # fmt: skip
        tell_node(tmp_path / f"{node}.sock", kept)

    with running_cluster(tmp_path, names, q=1, extra=extra) as cluster:
        keep("a", "1.changelog", b"one" * 300, "1")
        on_b = HostCopies(tmp_path / "b-copies", "b")
        wait_until(lambda: on_b.entry(str(partition / "1.changelog"), "1.changelog"), 20, "1.changelog on b's host")
        # The task moves to b: its executor writes version 2 and a snapshot's SST (b's node claims the partition).
        sst = b"sst" * 4000
        keep("b", "2.changelog", b"two" * 310, "2")
        keep("b", "SSTs/000015-264f.sst", sst, "2")
        on_a = HostCopies(tmp_path / "a-copies", "a")
        for name in ("2.changelog", "SSTs/000015-264f.sst"):
            wait_until(lambda n=name: on_a.entry(str(partition / n), n), 30, f"{name} on a's host")
        assert on_a.copy_path(str(partition / "SSTs/000015-264f.sst"), "SSTs/000015-264f.sst").read_bytes() == sst
        refused = [line for line in cluster.processes["b"].log().splitlines() if '"file_not_kept"' in line]
        assert all('"1.changelog"' in line for line in refused), refused  # a's own copy of it stays
