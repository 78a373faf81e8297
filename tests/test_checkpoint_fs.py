"""Checkpoint locations on remote file systems (statestore.checkpoint_fs): the engine writes increments and
snapshots to an S3 location on a loopback S3 server (moto in server mode, checking credentials) and restores
from it; the node's catch-up, Pull and Bootstrap read it, in-process and in real node processes; `file:` and
plain paths keep the local fast path; unusable locations fail with clear errors, never silently."""

from __future__ import annotations

import json
import logging
import shutil
import urllib.request
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import boto3
import grpc
import pytest
from moto.server import ThreadedMotoServer
from test_node_harness import Primary, free_port, replica_digest, running_cluster, wait_until

from statestore.checkpoint_fs import (
    LOCAL,
    CheckpointFSError,
    UnsupportedLocationError,
    resolve,
)
from statestore.checkpoint_location import CheckpointLocation
from statestore.errors import MissingCheckpointFileError
from statestore.node.catch_up import read_from_checkpoint_location
from statestore.node.increment_log import IncrementLog
from statestore.node.replica import ReplicaSet
from statestore.node.service import ReplicationService
from statestore.node.settings import GRPC_MESSAGE_OPTIONS, NodeSettings
from statestore.options import StoreOptions
from statestore.rpc import common_pb2, replication_pb2_grpc
from statestore.store import VersionedStore

BUCKET = "ckpt"
REGION = "us-east-1"
OPTIONS = StoreOptions(write_buffer_mb=4, block_cache_mb=4)


@dataclass(frozen=True)
class S3Server:
    """A loopback S3 server and the credentials it accepts."""

    endpoint: str
    access_key: str
    secret_key: str

    def keys(self, prefix: str) -> list[str]:
        """The object keys under `prefix` (read with boto3, beside our file system layer)."""
        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=REGION,
        )
        listed = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
        return sorted(o["Key"] for o in listed.get("Contents", []))


def _set_moto_auth(endpoint: str, unauthenticated_calls: str) -> None:
    request = urllib.request.Request(
        f"{endpoint}/moto-api/reset-auth",
        data=unauthenticated_calls.encode(),
        method="POST",
        headers={"Content-Type": "application/octet-stream"},
    )
    urllib.request.urlopen(request, timeout=10).read()


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server on 127.0.0.1 with a bucket and an IAM user allowed s3:*; every later call is
    authenticated (a wrong key or secret is refused, as by S3)."""
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        setup = {"endpoint_url": endpoint, "aws_access_key_id": "setup", "aws_secret_access_key": "setup"}
        boto3.client("s3", region_name=REGION, **setup).create_bucket(Bucket=BUCKET)
        iam = boto3.client("iam", region_name=REGION, **setup)
        iam.create_user(UserName="state-node")
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
        iam.put_user_policy(UserName="state-node", PolicyName="s3", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="state-node")["AccessKey"]
        _set_moto_auth(endpoint, "0")
        yield S3Server(endpoint, key["AccessKeyId"], key["SecretAccessKey"])
    finally:
        _set_moto_auth(endpoint, "inf")
        server.stop()


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The standard AWS settings pointing at the loopback server, as a node would get them."""
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return s3_server


def _commit(store: VersionedStore, location: CheckpointLocation, count: int, snapshot_every: int = 0) -> None:
    """`count` versions of puts, deletes and merges in two column families, committed to `location`."""
    for _ in range(count):
        v = store.version + 1
        if v == 1:
            store.create_column_family("other")
        for i in range(25):
            key = f"k{(v * 7 + i) % 60:03d}".encode()
            if i % 5 == 0:
                store.delete(key)
            elif i % 3 == 0:
                store.merge(key, f"+{v}".encode())
            else:
                store.put(key, f"v{v}-{i}".encode() * (1 + i % 4))
        store.put(f"o{v % 11}".encode(), str(v).encode(), "other")
        location.commit(store)
        if snapshot_every and v % snapshot_every == 0:
            location.write_snapshot(store)


def _content(store: VersionedStore) -> dict[str, list[tuple[bytes, bytes]]]:
    return {cf: list(store.items(cf)) for cf in store.column_families()}


def _location_uri(kind: str, tmp_path: Path, name: str) -> str:
    if kind == "s3":
        return f"s3a://{BUCKET}/{tmp_path.name}/{name}/state/0/0"
    return (tmp_path / name).as_uri()  # file:///...


# ------------------------------------------------------------------------------------------ the engine


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_engine_commits_snapshots_restores_and_retains(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if kind == "s3":
        s3 = request.getfixturevalue("s3")
    uri = _location_uri(kind, tmp_path, "engine")
    location = CheckpointLocation(uri, "0/0/default")
    assert location.is_local == (kind == "file")
    with VersionedStore.open(tmp_path / "primary", "0/0/default", OPTIONS) as primary:
        _commit(primary, location, 12, snapshot_every=5)
        assert location.increment_versions() == list(range(1, 13))
        assert location.snapshot_versions() == [5, 10]
        assert location.latest_version() == 12
        sizes = location.increment_sizes([3, 4, 99])
        assert set(sizes) == {3, 4} and all(size > 0 for size in sizes.values())
        expected = _content(primary)
        with location.restore(tmp_path / "restored", options=OPTIONS) as restored:
            assert restored.version == 12 and _content(restored) == expected
        with location.restore(tmp_path / "at-7", 7, OPTIONS) as at_seven:  # snapshot 5, increments 6 and 7
            assert at_seven.version == 7
        deleted = location.retain(3)  # 10..12 need snapshot 10 and increments 11, 12
        assert location.increment_versions() == [11, 12] and location.snapshot_versions() == [10]
        assert len(deleted) == 10 + 1  # increments 1..10, snapshot 5
        with location.restore(tmp_path / "after-retain", options=OPTIONS) as restored:
            assert _content(restored) == expected
        with pytest.raises(MissingCheckpointFileError, match=r"engine(/state/0/0)?/1\.increment: missing"):
            location.restore(tmp_path / "gone", 7, OPTIONS)
    if kind == "s3":  # really in the bucket, not on a local disk
        keys = s3.keys(f"{tmp_path.name}/engine/")
        assert f"{tmp_path.name}/engine/state/0/0/12.increment" in keys
        assert f"{tmp_path.name}/engine/state/0/0/10.snapshot/MANIFEST.json" in keys
        assert not (Path.cwd() / "s3a:").exists()


def test_a_damaged_snapshot_file_on_s3_is_passed_over(s3: S3Server, tmp_path: Path) -> None:
    location = CheckpointLocation(_location_uri("s3", tmp_path, "damaged"), "0/0/default")
    with VersionedStore.open(tmp_path / "primary", "0/0/default", OPTIONS) as primary:
        _commit(primary, location, 6, snapshot_every=3)
        expected = _content(primary)
    snapshot = location.snapshot_dir(6)
    name = next(e.name for e in location.fs.list_dir(snapshot) if e.name.endswith(".sst"))
    data = bytearray(location.fs.read_bytes(location.fs.join(snapshot, name)))
    data[len(data) // 2] ^= 0xFF
    location.fs.write_atomically(location.fs.join(snapshot, name), bytes(data))
    with location.restore(tmp_path / "restored", options=OPTIONS) as restored:  # from snapshot 3 + 4..6
        assert restored.version == 6 and _content(restored) == expected


def test_local_paths_and_file_uris_take_the_local_fast_path(tmp_path: Path) -> None:
    for given in (
        tmp_path / "a",
        str(tmp_path / "a"),
        f"{tmp_path / 'a'}/",
        (tmp_path / "a").as_uri(),
        f"file:{tmp_path}/a",
    ):
        fs, path = resolve(given)
        assert fs is LOCAL and path == str(tmp_path / "a"), given
    location = CheckpointLocation((tmp_path / "a").as_uri(), "0/0/default")
    assert location.path == tmp_path / "a" and location.increment_path(3) == tmp_path / "a" / "3.increment"


# ------------------------------------------------------------------------------------------ the node


def _settings(data_dir: Path, **overrides: object) -> NodeSettings:
    return NodeSettings(
        listen="127.0.0.1:0", data_dir=data_dir, store_write_buffer_mb=2, store_block_cache_mb=2, **overrides
    )


def _increment_blob(location: CheckpointLocation, ref: common_pb2.StoreRef, version: int) -> common_pb2.IncrementBlob:
    data = location.fs.read_bytes(location.increment_file(version))
    return common_pb2.IncrementBlob(store=ref, version=version, base_version=version - 1, data=data)


def test_replica_catches_up_from_an_s3_location(s3: S3Server, tmp_path: Path) -> None:
    uri = _location_uri("s3", tmp_path, "catch-up")
    ref = common_pb2.StoreRef(store_id="0/0/default", checkpoint_dir=uri)
    location = CheckpointLocation(uri, ref.store_id)
    with VersionedStore.open(tmp_path / "primary", ref.store_id, OPTIONS) as primary:
        _commit(primary, location, 20)
        expected = _content(primary)
    assert [v for v, _ in ((i.version, c) for i, c in read_from_checkpoint_location(ref, 18, 25))] == [18, 19, 20]
    replicas = ReplicaSet(tmp_path / "node" / "replicas", _settings(tmp_path / "node", bootstrap_min_gap=1000))
    try:
        replica = replicas.get_or_create(ref)
        # Version 20 arrives first: the replica fills 1..19 from the checkpoint location (no primary to pull from).
        receipt = replica.receive(_increment_blob(location, ref, 20), primary_address="")
        assert receipt.held == 20 and replica.version == 20
        with replica.locked():
            assert _content(replica.store) == expected
    finally:
        replicas.close()


def test_replica_bootstraps_from_an_s3_snapshot_served_by_the_primarys_node(
    s3: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The snapshot is version 25: the replica pulls 26 to 29 from the primary's node, then applies 30.
    _bootstrap_from_a_served_snapshot(_location_uri("s3", tmp_path, "bootstrap"), 25, tmp_path, caplog)


def test_a_bootstrap_that_lands_just_below_the_shipped_increment_applies_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The snapshot is the shipped increment's base: nothing to pull, and the increment kept while the snapshot
    came is applied at once (it stayed buffered until the next commit, the replica one version behind)."""
    _bootstrap_from_a_served_snapshot(_location_uri("file", tmp_path, "bootstrap"), 29, tmp_path, caplog)


def _bootstrap_from_a_served_snapshot(
    uri: str, snapshot_every: int, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Version 30 shipped to an empty replica far behind: it bootstraps from the snapshot the primary's node
    serves from the checkpoint location (version `snapshot_every`), and ends at 30 with the primary's content."""
    ref = common_pb2.StoreRef(store_id="0/1/default", checkpoint_dir=uri)
    location = CheckpointLocation(uri, ref.store_id)
    with VersionedStore.open(tmp_path / "primary", ref.store_id, OPTIONS) as primary:
        _commit(primary, location, 30, snapshot_every=snapshot_every)
        expected = _content(primary)
    # The primary's node: its Bootstrap and Pull serve the partition from the checkpoint location (its increment
    # log is empty, as after a restart).
    served = tmp_path / "primary-node"
    service = ReplicationService(
        _settings(served), ReplicaSet(served / "replicas", _settings(served)), IncrementLog(1 << 20), lambda _s: True
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=GRPC_MESSAGE_OPTIONS)
    replication_pb2_grpc.add_ReplicationServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    replicas = ReplicaSet(tmp_path / "node" / "replicas", _settings(tmp_path / "node", bootstrap_min_gap=16))
    try:
        replica = replicas.get_or_create(ref)
        with caplog.at_level(logging.INFO, logger="statestore.node"):
            receipt = replica.receive(_increment_blob(location, ref, 30), primary_address=f"127.0.0.1:{port}")
        assert (receipt.held, replica.version) == (30, 30), receipt
        done = [r for r in caplog.records if r.getMessage() == "bootstrap_done"]
        assert [r.fields["version"] for r in done] == [snapshot_every]  # type: ignore[attr-defined]
        serving = [r for r in caplog.records if r.getMessage() == "bootstrap_serving"]
        assert [r.fields["source"] for r in serving] == ["checkpoint_location"]  # type: ignore[attr-defined]
        with replica.locked():
            assert _content(replica.store) == expected
    finally:
        replicas.close()
        server.stop(0)


class _S3Primary(Primary):
    """The harness's primary, committing to an S3 checkpoint location."""

    def __init__(self, root: Path, store_id: str, node_address: str, checkpoint_dir: str) -> None:
        super().__init__(root, store_id, node_address)
        self.ref = common_pb2.StoreRef(store_id=store_id, checkpoint_dir=checkpoint_dir)
        self.location = CheckpointLocation(checkpoint_dir, store_id)

    def commit(self, version_seed: int) -> bytes:
        """Commit as the harness does; the increment's bytes read back from S3."""
        original = self.location.increment_path
        try:  # the harness reads the file back by path: give it the object's bytes instead
            self.location.increment_path = lambda v: _Bytes(self.location, v)  # type: ignore[method-assign]
            return super().commit(version_seed)
        finally:
            self.location.increment_path = original  # type: ignore[method-assign]


class _Bytes:
    def __init__(self, location: CheckpointLocation, version: int) -> None:
        self._location, self._version = location, version

    def read_bytes(self) -> bytes:
        return self._location.fs.read_bytes(self._location.increment_file(self._version))


def test_node_processes_bootstrap_from_an_s3_snapshot(s3: S3Server, tmp_path: Path) -> None:
    store = "3/0/default"
    with running_cluster(tmp_path, ("node-a", "node-b"), q=1, dead_after=10.0) as cluster:
        uri = _location_uri("s3", tmp_path, "cluster")
        primary = _S3Primary(tmp_path, store, cluster.addresses["node-a"], uri)
        try:
            primary.commit_and_ship(30, sync=True)
            primary.location.write_snapshot(primary.store)  # snapshot of version 30, in the bucket
            primary.commit_and_ship(5)
            cluster.processes["node-b"].kill9()
            shutil.rmtree(cluster.data_dir("node-b"))
            cluster.start_node("node-b")  # empty: bootstraps from node-a, which serves the snapshot in the bucket
            primary.commit_and_ship(5)
            last = primary.store.version
            wait_until(lambda: cluster.held("node-b", store) == last, 30, f"node-b at version {last}")
            assert replica_digest(cluster.data_dir("node-b"), store, uri) == (last, primary.digest())
            log = cluster.processes["node-b"].log()
            assert '"event": "bootstrap_done"' in log
            assert '"version": 30' in log.split('"event": "bootstrap_done"')[1].splitlines()[0]
            served = cluster.processes["node-a"].log().split('"event": "bootstrap_serving"')[1].splitlines()[0]
            assert '"source": "checkpoint_location"' in served
        finally:
            primary.close()


# ------------------------------------------------------------------------------------------ clear errors


def test_a_missing_bucket_is_named(s3: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    uri = "s3a://no-such-bucket/q/state/0/0"
    location = CheckpointLocation(uri, "0/0/default")
    with pytest.raises(
        CheckpointFSError, match=r"s3a://no-such-bucket/q/state/0/0: bucket 'no-such-bucket' does not exist"
    ):
        location.latest_version()
    with pytest.raises(CheckpointFSError, match="does not exist"):
        location.restore(tmp_path / "restored", 3, OPTIONS)
    ref = common_pb2.StoreRef(store_id="0/0/default", checkpoint_dir=uri)
    with caplog.at_level(logging.WARNING, logger="statestore.node"):
        assert list(read_from_checkpoint_location(ref, 1, 3)) == []
    failed = [r for r in caplog.records if r.getMessage() == "checkpoint_read_failed"]
    assert failed and "bucket 'no-such-bucket' does not exist" in failed[0].fields["error"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("wrong", ["AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID"])
def test_refused_credentials_are_named(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wrong: str
) -> None:
    location = CheckpointLocation(_location_uri("s3", tmp_path, "refused"), "0/0/default")
    monkeypatch.setenv(wrong, "AKIAWRONGWRONGWRONG0")
    with pytest.raises(CheckpointFSError, match="credentials were refused: check AWS_ACCESS_KEY_ID") as refused:
        location.latest_version()
    assert str(refused.value).startswith(f"s3a://{BUCKET}/{tmp_path.name}/refused/state/0/0: listing failed")
    with VersionedStore.open(tmp_path / "primary", "0/0/default", OPTIONS) as primary:
        primary.put(b"k", b"v")
        with pytest.raises(Exception, match="credentials were refused"):
            location.commit(primary)


def test_an_unreachable_endpoint_is_named(s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    location = CheckpointLocation(_location_uri("s3", tmp_path, "unreachable"), "0/0/default")
    with pytest.raises(CheckpointFSError, match=r"the S3 endpoint \(http://127\.0\.0\.1:\d+\) is unreachable"):
        location.latest_version()


def test_an_unknown_scheme_is_refused_naming_the_supported_ones(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(
        UnsupportedLocationError,
        match=r"foo://x/y: unsupported checkpoint location scheme 'foo' \(supported: file:, s3a:",
    ):
        CheckpointLocation("foo://x/y", "0/0/default")
    ref = common_pb2.StoreRef(store_id="0/0/default", checkpoint_dir="wasbs://c@a.blob.core.windows.net/x")
    with caplog.at_level(logging.WARNING, logger="statestore.node"):
        assert list(read_from_checkpoint_location(ref, 1, 3)) == []
    assert any("unsupported checkpoint location scheme 'wasbs'" in r.fields["error"] for r in caplog.records)  # type: ignore[attr-defined]


def test_hdfs_without_a_hadoop_client_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("JAVA_HOME", "CLASSPATH", "HADOOP_HOME", "ARROW_LIBHDFS_DIR"):
        monkeypatch.delenv(name, raising=False)
    location = CheckpointLocation("hdfs://namenode:8020/q/state/0/0", "0/0/default")
    with pytest.raises(CheckpointFSError) as missing:
        location.latest_version()
    message = str(missing.value)
    assert message.startswith("hdfs://namenode:8020: the HDFS client cannot start: JAVA_HOME is not set")
    assert "CLASSPATH holds no Hadoop jars" in message and "libhdfs.so is not found" in message


def test_malformed_remote_locations_are_named() -> None:
    with pytest.raises(CheckpointFSError, match=r"s3a:///x: a s3a: location names its bucket"):
        resolve("s3a:///x")
    with pytest.raises(CheckpointFSError, match="names its container and account"):
        resolve("abfss://account.dfs.core.windows.net/x")
    with pytest.raises(CheckpointFSError, match="not a local directory"):
        _ = CheckpointLocation("gs://bucket/x", "0/0/default").path
