"""Real Spark with replica groups for the tests of `test_replica_groups_spark*.py` and the replication bench:
a local-cluster session whose executors start their state nodes as sidecars, a streaming aggregation fed
one file per micro-batch, the controller's status, the sidecars' processes, and digests of the primary's
restored state and of every replica. Holds no tests of its own."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import grpc
from rocksdict import AccessType, Rdict

from spark_provider import local_cluster
from spark_provider.file_feed import publish
from spark_provider.progress import files_processed
from statestore import auth, tls
from statestore.auth import SECRET_ENV
from statestore.checkpoint_location import CheckpointLocation
from statestore.options import StoreOptions
from statestore.rpc import control_pb2, control_pb2_grpc
from statestore.store import META_COLUMN_FAMILY
from statestore.waiting import wait_for

SHUFFLE_PARTITIONS = 4
EXECUTORS = 3
CONTROLLER_KEY = "spark.sql.streaming.stateStore.statestore.controller"


def wait_until(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll `condition` until it returns a truthy value; fail the test after `timeout` seconds."""
    try:
        return wait_for(condition, timeout, what, interval)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}") from None


_DEFAULT_CONF = {"spark.dynamicAllocation.enabled": "false", "spark.decommission.enabled": "false"}


def start_spark(
    root: Path,
    app: str,
    master: str = f"local-cluster[{EXECUTORS},1,1024]",
    spark_conf: dict[str, str] | None = None,
    **settings: object,
) -> Any:
    """A SparkSession on our provider with its local dir (and so its sidecars' data dirs) under `root`."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_provider

    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.executor.memory", "1g")
    )
    # A session started earlier in this process may leave its confs behind for the next SparkContext (seen after
    # the elastic test's dynamic allocation: two executors instead of three): say what these sessions need.
    for key, value in {**_DEFAULT_CONF, **(spark_conf or {})}.items():
        builder = builder.config(key, value)
    session = spark_provider.enable(builder, local_dir=str(root / "local"), **settings).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


# ----------------------------------------------------------------------------- the streaming workload


@dataclass
class StreamingAggregation:
    """`groupBy(k).agg(sum, count, max)` over JSON files, one file per micro-batch, running until stopped."""

    spark: Any
    root: Path
    rows_per_batch: int = 2000
    keys: int = 3000
    fed: int = 0
    query: Any = None

    @property
    def input_dir(self) -> Path:
        return self.root / "input"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    def start(self) -> None:
        """Start the query (processing whatever was fed, then every file fed later)."""
        from pyspark.sql import functions as F

        self.input_dir.mkdir(parents=True, exist_ok=True)
        stream = (
            self.spark.readStream.schema("k string, v long").option("maxFilesPerTrigger", 1).json(str(self.input_dir))
        )
        self.query = (
            stream.groupBy("k")
            .agg(F.sum("v").alias("s"), F.count("*").alias("n"), F.max("v").alias("m"))
            .writeStream.outputMode("update")
            .format("noop")
            .option("checkpointLocation", str(self.checkpoint))
            .trigger(processingTime="0 seconds")
            .start()
        )

    def feed(self, files: int = 1) -> None:
        """Write `files` more input files (each becomes one micro-batch)."""
        for _ in range(files):
            rng = random.Random(self.fed)
            lines = "".join(
                json.dumps({"k": f"key{rng.randrange(self.keys):06d}", "v": rng.randrange(1000)}) + "\n"
                for _ in range(self.rows_per_batch)
            )
            publish(self.input_dir, self.fed, lines)
            self.fed += 1

    def rewrite_input(self, index: int) -> None:
        """Give input file `index` other rows (for a re-run of its batch: Spark reads the same file again)."""
        rng = random.Random(10_000 + index)
        lines = "".join(
            json.dumps({"k": f"key{rng.randrange(self.keys):06d}", "v": 5000 + rng.randrange(1000)}) + "\n"
            for _ in range(self.rows_per_batch)
        )
        publish(self.input_dir, index, lines)

    def processed(self) -> int:
        """Input files processed so far (committed micro-batches with data)."""
        self.raise_if_failed()
        return files_processed(self.query)

    def wait_processed(self, timeout: float = 60.0) -> None:
        """Wait until every file fed so far was processed."""
        wait_until(lambda: self.processed() >= self.fed, timeout, f"{self.fed} micro-batches processed", 0.2)

    def raise_if_failed(self) -> None:
        if self.query is not None and self.query.exception() is not None:
            raise AssertionError(f"the streaming query failed: {self.query.exception()}")

    def batch_durations_ms(self) -> list[int]:
        """Trigger durations of the micro-batches that had input, oldest first (Spark keeps the last 100)."""
        return [p["durationMs"]["triggerExecution"] for p in self.query.recentProgress if p["numInputRows"] > 0]

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()

    def store_dirs(self) -> dict[str, Path]:
        """Store id -> checkpoint location of each state store partition."""
        state = self.checkpoint / "state" / "0"
        return {f"0/{p.name}/default": p for p in sorted(state.iterdir()) if p.name.isdigit()}

    def last_versions(self) -> dict[str, int]:
        """Store id -> latest version committed to the checkpoint location (the primary's last version)."""
        return {s: CheckpointLocation(d, s).latest_version() for s, d in self.store_dirs().items()}


# ----------------------------------------------------------------------------- status and processes


def controller_address(spark: Any) -> str:
    """The address of the controller `enable()` started in this driver."""
    return spark.conf.get(CONTROLLER_KEY)


def status(address: str) -> control_pb2.StatusReply:
    """The controller's Status (with the application's secret, which the driver's controller holds)."""
    with auth.channel(address) as channel:
        return control_pb2_grpc.ControlStub(channel).Status(control_pb2.StatusRequest(), timeout=5)


def _of_job(partition: control_pb2.PartitionStatus, job: StreamingAggregation | None) -> bool:
    """Whether `partition` belongs to `job`'s query (any partition when `job` is None)."""
    if job is None:
        return True
    return Path(partition.store.checkpoint_dir).resolve().is_relative_to(job.checkpoint.resolve())


def replicas_by_partition(
    reply: control_pb2.StatusReply, job: StreamingAggregation | None = None
) -> dict[str, dict[str, int]]:
    """Store id -> {replica node id: version held}, of `job`'s partitions (of all, if the only query)."""
    return {
        p.store.store_id: {r.node_id: r.version_held for r in p.replicas} for p in reply.partitions if _of_job(p, job)
    }


def primaries(reply: control_pb2.StatusReply, job: StreamingAggregation | None = None) -> dict[str, str]:
    """Store id -> node id of its primary, of `job`'s partitions (of all, if the only query)."""
    return {p.store.store_id: p.primary_node for p in reply.partitions if _of_job(p, job)}


@dataclass
class LagSampler:
    """Samples the controller's status in the background and keeps the largest lag in versions it saw."""

    address: str
    interval: float = 0.1
    max_lag: int = 0
    samples: int = 0
    worst: str = ""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> LagSampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(grpc.RpcError):
                reply = status(self.address)
                self.samples += 1
                for p in reply.partitions:
                    for r in p.replicas:
                        if r.lag_versions > self.max_lag:
                            self.max_lag = r.lag_versions
                            self.worst = f"{p.store.store_id} on {r.node_id}: {p.primary_version} vs {r.version_held}"


def node_dir(root: Path, node_id: str) -> Path:
    """Data dir of the sidecar of executor `node_id`: `root/local/<pid>-<uuid>/node-<id>`, inside the directory of
    the executor JVM that started it (docs/formats.md section 6). It stays when the sidecar is killed (a restarted
    sidecar reopens it), and goes once its JVM is gone and another JVM starts on the same local dir. Found by
    globbing, so it does not depend on a running process; when several JVMs left one (not expected within an
    application: executor ids are not reused), the most recently modified; when none, a path that does not exist
    under `root/local`."""
    found = []
    for path in (root / "local").glob(f"*-*/node-{node_id}"):
        with contextlib.suppress(OSError):
            found.append((path.stat().st_mtime, str(path), path))
    return max(found)[2] if found else root / "local" / "no-jvm-dir" / f"node-{node_id}"


def sidecar_pids(root: Path) -> dict[str, int]:
    """Node id -> pid of each running sidecar whose data dir is under `root` (`root/local/<jvm dir>/node-<id>`)."""
    return local_cluster.sidecar_pids(root / "local")


def process_argv(pid: int) -> list[str] | None:
    """The command line of process `pid`, or None when it is gone or a zombie."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if _zombie(pid):
            return None
    except OSError:
        return None
    return [a.decode(errors="replace") for a in argv]


def kill9(pid: int) -> None:
    """SIGKILL `pid` and wait until it is gone."""
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid), 10, f"pid {pid} gone", 0.02)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def stop_leftover_sidecars(root: Path, timeout: float = 15.0) -> list[int]:
    """Wait for the sidecars under `root` to exit with their executors; kill -9 those that do not."""
    try:
        wait_until(lambda: not sidecar_pids(root), timeout, "sidecars to exit with their executors", 0.2)
        return []
    except AssertionError:
        left = list(sidecar_pids(root).values())
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return left


# ----------------------------------------------------------------------------- content


def store_digest(db_path: Path) -> tuple[int, dict[str, str]]:
    """(version, sha256 of all keys and values per user column family) of a store directory, read-only."""
    options = StoreOptions().rocksdb_options(create=False)
    names = Rdict.list_cf(str(db_path), options)
    db = Rdict(
        str(db_path),
        options,
        column_families={n: StoreOptions().rocksdb_options(create=False) for n in names},
        access_type=AccessType.read_only(),
    )
    try:
        meta = db.get_column_family(META_COLUMN_FAMILY)
        version = int.from_bytes(meta[b"version"], "big")
        families = sorted(
            k[len(b"count/") :].decode() for k in meta.keys(from_key=b"count/") if k.startswith(b"count/")
        )
        digests = {}
        for cf in families:
            table = db.get_column_family(cf)
            digest = hashlib.sha256()
            pairs = 0
            for key, value in table.items():
                digest.update(len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value)
                pairs += 1
            digests[cf] = f"{pairs}:{digest.hexdigest()}"
            table.close()
        meta.close()
        return version, digests
    finally:
        db.close()


def replica_db(root: Path, node_id: str, store_id: str, checkpoint_dir: Path | None = None) -> Path:
    """Where node `node_id` keeps its replica of `store_id` (of the store partition checkpointed in
    `checkpoint_dir`, when the node replicates several queries), found by the `store.json` beside each
    replica (docs/node.md)."""
    found = []
    for ref_file in sorted((node_dir(root, node_id) / "replicas").glob("*/store.json")):
        ref = json.loads(ref_file.read_text())
        same_location = checkpoint_dir is None or Path(ref["checkpoint_dir"]).resolve() == checkpoint_dir.resolve()
        if ref["store_id"] == store_id and same_location:
            found.append(ref_file.parent / "db")
    assert len(found) == 1, f"node {node_id} holds {len(found)} replicas of {store_id} ({checkpoint_dir}): {found}"
    return found[0]


def primary_digest(job: StreamingAggregation, store_id: str, version: int, scratch: Path) -> tuple[int, dict[str, str]]:
    """Digest of the primary's state at `version`, restored from the checkpoint location by the engine."""
    target = scratch / quote(store_id, safe="")
    store = CheckpointLocation(job.store_dirs()[store_id], store_id).restore(target, version)
    store.close()
    try:
        return store_digest(target)
    finally:
        shutil.rmtree(target, ignore_errors=True)


def replicas_converged(address: str, job: StreamingAggregation, q: int) -> dict[str, dict[str, int]] | None:
    """The replica groups when every partition has `q` replicas all at the primary's last version, else None."""
    last = job.last_versions()
    groups = replicas_by_partition(status(address), job)
    if set(groups) != set(last):
        return None
    for store_id, held in groups.items():
        if len(held) != q or any(v != last[store_id] for v in held.values()):
            return None
    return groups


def wait_converged(address: str, job: StreamingAggregation, q: int, timeout: float) -> dict[str, dict[str, int]]:
    """`replicas_converged`, waited for; on timeout the error shows the primaries' and replicas' versions."""
    try:
        return wait_until(lambda: replicas_converged(address, job, q), timeout, "replicas at the last version")
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}: primaries {job.last_versions()}, replicas {replicas_by_partition(status(address), job)}"
        ) from None


def assert_replicas_identical(root: Path, job: StreamingAggregation, groups: dict[str, dict[str, int]]) -> int:
    """Every replica's content equals the primary's restored state at the same version; returns keys compared."""
    compared = 0
    for store_id, held in sorted(groups.items()):
        for node_id, version in sorted(held.items()):
            expected = primary_digest(job, store_id, version, root / "restored")
            actual = store_digest(replica_db(root, node_id, store_id, job.store_dirs()[store_id]))
            assert actual == expected, f"replica of {store_id} on node {node_id} differs from the primary"
            compared += sum(int(d.split(":")[0]) for d in expected[1].values())
    return compared


def node_log_events(root: Path, node_id: str, event: str) -> list[dict[str, Any]]:
    """The JSON log lines of sidecar `node_id` (all its runs) with this event name."""
    path = node_dir(root, node_id) / "node.log"
    found = []
    for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if record.get("event") == event:
                found.append(record)
    return found


def run_statestore_status(address: str) -> str:
    """`statestore status --controller ADDRESS` as a user runs it."""
    result = subprocess.run(
        [sys.executable, "-m", "statestore.cli", "status", "--controller", address],
        env={**os.environ, SECRET_ENV: auth.secret_for(address), **tls.environment(tls.current())},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


_BOILERPLATE = ("NativeCodeLoader", "SPARK_LOCAL_IP", "resolves to a loopback address", "SIGPWR")


def executor_errors(spark: Any, most: int = 30) -> list[str]:
    """Per executor, the last `most` lines it logged at WARN or ERROR or that name an exception, in order
    (local-cluster executors log into pyspark's work directory)."""
    import pyspark

    work = Path(pyspark.__file__).parent / "work" / spark.sparkContext.applicationId
    lines = []
    for log in sorted(work.glob("*/stderr")):
        found = [
            f"executor {log.parent.name}: {line[:400]}"
            for line in log.read_text(errors="replace").splitlines()
            if any(mark in line for mark in (" WARN ", " ERROR ", "Exception", "Caused by"))
            and not any(noise in line for noise in _BOILERPLATE)
        ]
        lines.extend(found[-most:])
    return lines


@contextlib.contextmanager
def replica_cluster(
    root: Path, q: int, app: str, spark_conf: dict[str, str] | None = None, **settings: object
) -> Iterator[Any]:
    """A local-cluster session with replication factor `q`; on exit its sidecars must be gone."""
    spark = start_spark(root, app, spark_conf=spark_conf, replication_factor=q, **settings)
    try:
        yield spark
    except BaseException:  # the test's report shows the executors' side (a later test may clear their logs)
        with contextlib.suppress(Exception):
            errors = executor_errors(spark)
            print("\n".join(["the executors' last warnings and errors:", *errors]), file=sys.stderr)
        raise
    finally:
        spark.stop()
        left = stop_leftover_sidecars(root)
        assert not left, f"sidecars {left} outlived their executors"


@contextlib.contextmanager
def running_job(spark: Any, root: Path, q: int) -> Iterator[StreamingAggregation]:
    """The streaming aggregation under `root/job`, running and warmed up: two batches processed, every executor
    ran tasks (so every executor's sidecar is up and alive in the controller's eyes) and every partition has
    its `q` replicas at the primary's last version. Stopped on exit."""
    job = StreamingAggregation(spark, root / "job")
    job.feed(2)
    job.start()
    try:
        job.wait_processed(120)
        wait_until(lambda: len(sidecar_pids(root)) == EXECUTORS, 60, "a sidecar per executor")
        address = controller_address(spark)
        wait_until(lambda: sum(n.alive for n in status(address).nodes) == EXECUTORS, 30, "every node alive")
        wait_converged(address, job, q, 30)
        yield job
    finally:
        job.stop()


def replica_holder(address: str) -> str:
    """The node holding the most replicas among those that are primaries (so its executor commits, and its
    provider restarts the sidecar when it is killed)."""
    reply = status(address)
    counts = {node: 0 for node in primaries(reply).values()}
    for held in replicas_by_partition(reply).values():
        for node in held:
            if node in counts:
                counts[node] += 1
    return max(sorted(counts), key=lambda n: counts[n])


def feed_checking_lag(
    job: StreamingAggregation,
    address: str,
    q: int,
    batches: int = 6,
    check: Callable[[str, dict[str, int], int], None] | None = None,
) -> LagSampler:
    """Feed `batches` micro-batches one at a time, sampling the controller's status meanwhile. Right after each
    batch, every partition has `q` replicas, each holding the primary's last version or the one before;
    `check(store_id, replicas, last version)` may assert more. Returns the sampler (its largest lag seen)."""
    with LagSampler(address) as sampler:
        for _ in range(batches):
            job.feed()
            job.wait_processed()
            last = job.last_versions()
            groups = replicas_by_partition(status(address))
            assert set(groups) == set(last) and len(last) == SHUFFLE_PARTITIONS
            for store_id, held in groups.items():
                assert len(held) == q, f"{store_id} has replicas {held}"
                assert all(last[store_id] - 1 <= v <= last[store_id] for v in held.values()), (store_id, held, last)
                if check is not None:
                    check(store_id, held, last[store_id])
    return sampler


def feed_until_sidecar_restarted(job: StreamingAggregation, root: Path, node_id: str, old_pid: int) -> int:
    """After sidecar `old_pid` of executor `node_id` was killed: feed batches until that executor's provider
    started it again (on a later commit, at most once every 5 s), then two more so that it has shipped and
    received since; returns the new sidecar's pid."""
    for _ in range(20):
        if sidecar_pids(root).get(node_id, old_pid) != old_pid:
            break
        job.feed()
        job.wait_processed()
    new_pid = wait_until(lambda: sidecar_pids(root).get(node_id) not in (None, old_pid), 30, "the sidecar restarted")
    job.feed(2)
    job.wait_processed()
    return new_pid
