"""The primary's side of file-level replicas (statestore.node.file_replicas) in the orders a failover and a move
produce: a demoted node's late snapshot upload, a group that arrives before a claim's adoption, a member that
restarts, and copies Spark's retention deletes. Two real FileReplicas, the member's behind a real gRPC server on
loopback, as a node serves `Replication.KeepFile`."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path

import grpc
from test_file_replicas import keep_like_the_executor
from test_node_harness import wait_until

from statestore.node.file_replicas import FileReplicas, KeptFile
from statestore.node.host_copies import HostCopies, state_file_version
from statestore.node.settings import NodeSettings
from statestore.rpc import common_pb2, control_pb2, replication_pb2, replication_pb2_grpc

STORE_ID = "0/3/default"


class _KeepFiles(replication_pb2_grpc.ReplicationServicer):
    """A node's `Replication.KeepFile`, as statestore.node.service serves it."""

    def __init__(self, replicas: FileReplicas) -> None:
        self.replicas = replicas

    def KeepFile(
        self, request_iterator: Iterator[replication_pb2.FileCopyChunk], context: grpc.ServicerContext
    ) -> replication_pb2.FileCopyKept:
        """Keep the shipped file."""
        return self.replicas.receive(request_iterator)


@contextmanager
def member_node(tmp_path: Path, name: str, port: int = 0) -> Iterator[tuple[FileReplicas, HostCopies, int]]:
    """A member's file replicas served on loopback: (its FileReplicas, its host's copies, its port)."""
    copies = tmp_path / f"{name}-copies"
    settings = NodeSettings(listen="127.0.0.1:0", data_dir=tmp_path / f"{name}-data", node_id=name,
                            replica_files_dir=copies)  # fmt: skip
    replicas = FileReplicas(settings, lambda: None)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    replication_pb2_grpc.add_ReplicationServicer_to_server(_KeepFiles(replicas), server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        yield replicas, HostCopies(copies, name), bound
    finally:
        server.stop(None)
        replicas.close()


class Host:
    """The primary's host: a checkpoint partition directory, the executor's copies of its files and its node's
    FileReplicas (`ask_groups` is what the node does when a claim wants its group)."""

    def __init__(self, tmp_path: Path, ask_groups: Callable[[], None] = lambda: None) -> None:
        self.partition = tmp_path / "ckpt" / "state" / "0" / "3"
        self.partition.mkdir(parents=True)
        self.copies = tmp_path / "a-copies"
        settings = NodeSettings(listen="127.0.0.1:0", data_dir=tmp_path / "a-data", node_id="a",
                                replica_files_dir=self.copies)  # fmt: skip
        self.store = common_pb2.StoreRef(store_id=STORE_ID, checkpoint_dir=str(self.partition))
        self.replicas = FileReplicas(settings, lambda: ask_groups())

    def write(self, name: str, data: bytes) -> KeptFile:
        """The executor writes `name` to the checkpoint and keeps a copy (the node is not told)."""
        path = self.partition / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        copy = keep_like_the_executor(self.copies, str(path), name, data)
        return KeptFile(str(path), name, state_file_version(name) or 0, len(data), zlib.crc32(data), copy)

    def keep(self, name: str, data: bytes) -> str:
        """The executor writes `name` and tells its node (FILE_KEPT); the node's note."""
        return self.replicas.kept(self.store, self.write(name, data), None)

    def group(self, *members: tuple[str, int]) -> control_pb2.ReplicaGroup:
        group = control_pb2.ReplicaGroup(replicas=[control_pb2.NodeRef(node_id=n, address=f"127.0.0.1:{p}")
                                                   for n, p in members])  # fmt: skip
        group.store.CopyFrom(self.store)
        return group


def _holds(copies: HostCopies, host: Host, names: list[str]) -> bool:
    return all(copies.entry(str(host.partition / name), name) is not None for name in names)


def test_a_snapshot_the_old_executor_uploads_after_a_demotion_does_not_claim_the_partition_back(
    tmp_path: Path,
) -> None:
    """The task moved away and the controller demoted this node; then Spark's maintenance on the old executor
    uploads the snapshot it queued (its SSTs, then its zip). Neither claims the partition again (a claimed node
    refuses the real primary's files as "claimed here"), and the SSTs are the partition's files when its task
    comes back and claims it with a newer version."""
    host = Host(tmp_path)
    try:
        host.keep("4.changelog", b"four" * 100)
        assert host.replicas.is_primary(host.store)
        host.replicas.demote([common_pb2.VersionHeld(store=host.store, version=5)])
        assert not host.replicas.is_primary(host.store)

        assert host.keep("SSTs/000021-9a0b.sst", b"sst" * 2000).startswith("not primary")
        assert host.keep("4.zip", b"zip" * 300).startswith("not primary")
        assert not host.replicas.is_primary(host.store)
        header = replication_pb2.FileCopyHeader(checkpoint_path=str(host.partition / "6.changelog"),
                                                name="6.changelog", size=3, crc32=zlib.crc32(b"six"), version=6)
        header.store.CopyFrom(host.store)
        kept = host.replicas.receive(iter([replication_pb2.FileCopyChunk(header=header, data=b"six")]))
        assert kept.kept and not kept.claimed_here, kept.detail

        # The task comes back: its commit of version 7 claims the partition, and a member that joins gets the SST.
        host.keep("7.changelog", b"seven" * 100)
        assert host.replicas.is_primary(host.store)
        with member_node(tmp_path, "b") as (_member, on_b, port):
            host.replicas.set_groups([host.group(("b", port))])
            wait_until(lambda: _holds(on_b, host, ["SSTs/000021-9a0b.sst", "7.changelog"]), 20,
                       "the SST kept while demoted and 7.changelog on b's host")  # fmt: skip
    finally:
        host.replicas.close()


def test_a_member_that_joined_before_the_claims_adoption_gets_the_adopted_files(tmp_path: Path) -> None:
    """A task moved here loads the partition from copies on this host (a snapshot and its SST a peer shipped), then
    commits: the claim adopts those copies as the partition's files. The heartbeat the claim asks for can answer
    before the adoption runs; the member it names still gets the adopted files."""
    with member_node(tmp_path, "b") as (_member, on_b, port):
        holder: list[Host] = []
        host = Host(tmp_path, ask_groups=lambda: holder[0].replicas.set_groups([holder[0].group(("b", port))]))
        holder.append(host)
        try:
            for name, data in (("SSTs/000008-5f0c.sst", b"sst8" * 900), ("2.zip", b"zip" * 500),
                               ("3.changelog", b"three" * 40)):  # fmt: skip
                host.write(name, data)
            host.keep("4.changelog", b"four" * 41)
            wait_until(lambda: _holds(on_b, host, ["SSTs/000008-5f0c.sst", "2.zip", "3.changelog", "4.changelog"]),
                       20, "the adopted copies and 4.changelog on b's host")  # fmt: skip
        finally:
            host.replicas.close()


def test_a_member_whose_node_restarts_gets_the_files_shipped_while_it_was_down(tmp_path: Path) -> None:
    """The member's node restarts on the same port within the controller's dead-after (so it never leaves the
    group, and never joins it anew): a file shipped while it was down reaches it once it serves again."""
    host = Host(tmp_path)
    try:
        with member_node(tmp_path, "b") as (_member, on_b, port):
            host.keep("1.changelog", b"one" * 100)
            host.replicas.set_groups([host.group(("b", port))])
            wait_until(lambda: _holds(on_b, host, ["1.changelog"]), 20, "1.changelog on b's host")
        host.keep("2.changelog", b"two" * 100)  # b is down
        with member_node(tmp_path, "b", port) as (_member, on_b, _port):
            wait_until(lambda: _holds(on_b, host, ["2.changelog"]), 30, "2.changelog on b's host after its restart")
    finally:
        host.replicas.close()


def test_a_replicas_size_counts_each_file_once_and_drops_what_retention_deleted(tmp_path: Path) -> None:
    """A file shipped again (a retry, a second primary) is one file; a copy pruned when its checkpoint file is gone
    no longer counts. (Placement weighs a replica by this size.)"""
    with member_node(tmp_path, "b") as (member, _on_b, _port):
        partition = tmp_path / "ckpt" / "state" / "0" / "3"
        partition.mkdir(parents=True)
        store = common_pb2.StoreRef(store_id=STORE_ID, checkpoint_dir=str(partition))

        def ship(name: str, data: bytes) -> None:
            (partition / name).write_bytes(data)
            header = replication_pb2.FileCopyHeader(checkpoint_path=str(partition / name), name=name, size=len(data),
                                                    crc32=zlib.crc32(data), version=state_file_version(name) or 0)
            header.store.CopyFrom(store)
            assert member.receive(iter([replication_pb2.FileCopyChunk(header=header, data=data)])).kept

        ship("1.changelog", b"one" * 100)
        ship("1.changelog", b"one" * 100)
        ship("2.changelog", b"two" * 50)
        assert [h.size_bytes for h in member.held()] == [450]
        (partition / "1.changelog").unlink()  # Spark's retention
        ship("2.zip", b"zip" * 10)
        assert [h.size_bytes for h in member.held()] == [180]


def test_a_file_kept_frame_naming_a_copy_outside_the_hosts_copies_directory_is_refused(tmp_path: Path) -> None:
    """The node ships the named copy's bytes to peers: a frame naming any other file the node's user can read (by
    path, or by a link in the copies directory) claims nothing and ships nothing."""
    host = Host(tmp_path)
    try:
        secret = tmp_path / "secret"
        secret.write_bytes(b"not state")
        link = host.copies / "link"
        host.copies.mkdir(parents=True, exist_ok=True)
        link.symlink_to(secret)
        for path in (secret, link, host.copies / ".." / "secret"):
            file = KeptFile(str(host.partition / "1.changelog"), "1.changelog", 1, 9, zlib.crc32(b"not state"), path)
            assert host.replicas.kept(host.store, file, None).startswith("refused"), path
        assert not host.replicas.is_primary(host.store)
    finally:
        host.replicas.close()
