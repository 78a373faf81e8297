"""The provider's documented settings: Spark configuration keys, defaults and meanings, in one place."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from spark_provider.setting_values import Address, BadValue, Choice, Flag, Integer, Kind, Number, SettingError, Text

PROVIDER_CLASS = "io.statestore.spark.StatestoreProvider"
# Starts each executor's state node with the executor (spark.plugins).
PLUGIN_CLASS = "io.statestore.spark.StatestorePlugin"
# Steers a restarted query's partitions before its first batch (spark.sql.streaming.streamingQueryListeners).
QUERY_LISTENER_CLASS = "io.statestore.spark.QueryStarts"
QUERY_LISTENERS_KEY = "spark.sql.streaming.streamingQueryListeners"
SPARK_ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
SPARK_HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
PREFIX = "spark.sql.streaming.stateStore.statestore."


@dataclass(frozen=True)
class Setting:
    """One setting: the keyword `enable()` accepts, its Spark key, default, meaning and the values it accepts."""

    name: str
    key: str
    default: str | None
    doc: str
    kind: Kind

    def conf(self, value: object, given_as: str = "") -> str:
        """`value` as the conf string the provider reads; a SettingError names the setting (as `given_as`: the
        keyword or the Spark key the user set), the value and what is allowed."""
        try:
            return self.kind.conf(value)
        except BadValue as exc:
            label = given_as or f"{self.name} ({self.key})"
            raise SettingError(f"statestore setting {label} is {value!r}: expected {exc}") from None


SETTINGS: tuple[Setting, ...] = (
    Setting("local_dir", PREFIX + "localDir", None,
            "Directory for the executors' local RocksDB copies (default: <java.io.tmpdir>/statestore-provider). "
            "Directories of dead JVMs are deleted at start-up.",
            Text("a path")),
    Setting("increment_compression", PREFIX + "incrementCompression", "zstd",
            "Compression of the increment body written at every commit: `zstd` or `none`.",
            Choice(("zstd", "none"))),
    Setting("zstd_level", PREFIX + "zstdLevel", "1", "zstd level for increments.",
            Integer(1, 22)),
    Setting("write_buffer_size_mb", PREFIX + "writeBufferSizeMB", "64", "RocksDB memtable size per column family.",
            Integer(1)),
    Setting("block_cache_size_mb", PREFIX + "blockCacheSizeMB", "64",
            "RocksDB block cache shared by all stores of an executor, when `memory_budget_mb` is 0.",
            Integer(1)),
    Setting("memory_budget_mb", PREFIX + "memoryBudgetMB", "256",
            "RocksDB memory of all the stores of an executor together: one block cache of this size holds their "
            "blocks and, charged to it by a write buffer manager of half its size, their write buffers (RocksDB "
            "flushes the largest when they hold more), as Spark's RocksDB provider's bounded mode; 0: unbounded "
            "(`block_cache_size_mb` of cache, `write_buffer_size_mb` per column family and store).",
            Integer(0)),
    Setting("node_memory_budget_mb", PREFIX + "nodeMemoryBudgetMB", "128",
            "RocksDB memory of all the replicas an executor's state node holds, in the same way as "
            "`memory_budget_mb`; 0: unbounded (8 MiB of cache per replica). `statestore status` shows what each "
            "node holds.",
            Integer(0)),
    Setting("min_deltas_for_snapshot", "spark.sql.streaming.stateStore.minDeltasForSnapshot", "10",
            "Spark's setting: a snapshot every this many versions (uploaded in the background).",
            Integer(1)),
    Setting("min_batches_to_retain", "spark.sql.streaming.minBatchesToRetain", "100",
            "Spark's setting: versions kept restorable in the checkpoint location.",
            Integer(1)),
    Setting("replication_factor", PREFIX + "replicationFactor", "1",
            "Replicas per state partition (q) kept warm on other executors' state nodes; 0 turns the state "
            "nodes and the controller off.",
            Integer(0)),
    Setting("sync", PREFIX + "sync", "false",
            "Whether a commit waits until one replica acked its increment (bounded by the node's sync timeout).",
            Flag()),
    Setting("node_socket", PREFIX + "nodeSocket", None,
            "Unix socket of a state node run as a service (`statestore node --local-socket PATH ...`); unset, "
            "each executor starts its own node as a sidecar.",
            Text("a path")),
    Setting("controller", PREFIX + "controller", None,
            "Address (host:port) of a controller run as a service; unset, the driver plugin (`spark.plugins`, "
            "which `enable()` turns on) starts one beside the driver's JVM and sets it.",
            Address()),
    Setting("materialize_timeout_ms", PREFIX + "materializeTimeoutMs", "10000",
            "Longest a load waits for its state node's copy of a partition (a replica's checkpoint, or a peer's "
            "copy) before restoring from the checkpoint location instead.",
            Integer(0)),
    Setting("peer_fetch", PREFIX + "peerFetch", "auto",
            "Whether a state node without a replica of a partition a task loads may fetch a peer's copy over the "
            "network: `auto` (only when the checkpoint location is not a local file system: a remote object store "
            "is slower than a peer), `always`, `never`.",
            Choice(("auto", "always", "never"))),
    Setting("partial_merge", PREFIX + "partialMerge", "true",
            "Whether a load from the state node's replica that lacks only the last increment (a hand-over: the "
            "previous primary's last increment still on its way) starts the batch at once: its writes go to an "
            "overlay while that increment is applied in the background, and reads wait until the key's value is "
            "known. `false`: the load applies the increment first.",
            Flag()),
    Setting("open_ahead", PREFIX + "openAhead", "true",
            "Whether an executor opens its state node's replica of a partition a planned hand-over moves to it "
            "before the micro-batch that moves it (the controller names such partitions to the node), so that "
            "batch's load only catches the open copy up. `false`: the load asks the node then.",
            Flag()),
    Setting("faults_file", PREFIX + "faultsFile", None,
            "Tests only: a file arming the provider's fault points, one a line (`<point> kill [<partition>]` or "
            "`<point> delay <millis> [<partition>]`; points `load`, `commit`, `committed`, `acked` (sync "
            "mode), `last-increment`, `last-increment-apply`); the first task reaching that point deletes it and acts.",
            Text("a path")),
    Setting("secret", PREFIX + "secret", None,
            "The application's secret: every call to its controller and state nodes must carry it (statestore.auth, "
            "docs/security.md). Unset: `enable()` or the driver plugin makes one as it starts the controller (Spark's "
            "`spark.authenticate.secret` if set, else a random one); with a `controller` of your own, that "
            "controller's secret (or the STATESTORE_SECRET environment variable). Spark redacts it in its UI.",
            Text("a string")),
    Setting("tls_cert", PREFIX + "tlsCert", None,
            "TLS for every gRPC call of the application (docs/security.md): the PEM certificate chain its controller "
            "and state nodes present (its names must cover the hosts they are called at: 127.0.0.1 on a local "
            "master). The file must be at this path on the driver and every executor. Unset: plaintext.",
            Text("a path")),
    Setting("tls_key", PREFIX + "tlsKey", None, "TLS: the certificate's PEM private key (same path everywhere).",
            Text("a path")),
    Setting("tls_ca", PREFIX + "tlsCa", None,
            "TLS: the PEM CA certificate that signs the application's certificates; set, every side checks the "
            "other's certificate against it (mutual TLS). Unset: servers are checked against the system's roots "
            "and clients present no certificate.",
            Text("a path")),
    Setting("forget_after_seconds", PREFIX + "forgetAfterSeconds", "60",
            "For the controller we start: a partition no node claims any more (its query stopped and "
            "Spark unloaded its stores) is forgotten after this long, and its replicas are deleted.",
            Number(0)),
    Setting("load_balancing", PREFIX + "loadBalancing", "off",
            "For the controller we start: hand primaries over (one increment each) when one executor "
            "stays busier than the others: `on`, `dry-run` (only show in `statestore status` the moves it would "
            "make and why), `off`.",
            Choice(("off", "dry-run", "on"))),
    Setting("load_balancing_factor", PREFIX + "loadBalancingFactor", "1.5",
            "Load balancing: an executor's task time per core over this many times the executors' mean counts as "
            "imbalance.",
            Number(1)),
    Setting("load_balancing_batches", PREFIX + "loadBalancingBatches", "5",
            "Load balancing: micro-batches in a row over the factor before moving anything (after any operation "
            "it waits twice as many before counting again: hysteresis).",
            Integer(1)),
    Setting("load_balancing_max_moves", PREFIX + "loadBalancingMaxMoves", "2",
            "Load balancing: hand-overs per automatic operation (batched strategy).",
            Integer(1)),
    Setting("warm_up_mb_per_second", PREFIX + "warmUpMBPerSecond", "64",
            "How fast a state node sends a whole replica to a node that holds none (a new executor warming up "
            "before it takes primaries, a replica re-placed after a loss or a drain), in MiB/s: the warm-up "
            "throttle, so that the copies do not slow the running query.",
            Number(0)),
    Setting("node_port", PREFIX + "nodePort", "0",
            "The port each executor's state node listens on, on the executor's host; if taken (two executors on a "
            "host) the next ones, up to 16 further, as Spark's own ports; 0: any free port. Set it where a firewall "
            "between executors' hosts must name the ports (docs/deploy.md).",
            Integer(0, 65535 - 16)),
    Setting("controller_port", PREFIX + "controllerPort", "0",
            "For the controller we start: the port it listens on in the driver (0: any free port).",
            Integer(0, 65535)),
    Setting("metrics_port", PREFIX + "metricsPort", None,
            "For the controller we start: serve its figures (replica lag, failovers, loads by source, bytes "
            "shipped, moves) in Prometheus' text format at http://<controller host>:PORT/metrics (0: any free "
            "port, logged); unset: no endpoint.",
            Integer(0, 65535)),
    Setting("rereplication_delay_seconds", PREFIX + "rereplicationDelaySeconds", "10",
            "For the controller we start: after an executor is lost, new replicas for its roles wait this "
            "long, so that the copies do not slow the batch resuming its partitions and Spark's replacement "
            "executor can take some of them (the failed-over partitions run with one replica fewer meanwhile).",
            Number(0, inclusive=True)),
)

BY_NAME = {s.name: s for s in SETTINGS}


BY_KEY = {s.key: s for s in SETTINGS}


def spark_confs(existing: Mapping[str, str] | None = None, **overrides: object) -> dict[str, str]:
    """The Spark confs for our settings: defaults, then the values of our keys in `existing` (the confs the
    builder or session already has: a user's `.config(...)` is kept, not overwritten by a default), then
    `overrides` (keyword names of SETTINGS). Every value is checked: a SettingError names the setting, the value
    and what is allowed; a TypeError an unknown keyword, a SettingError an unknown key under our prefix."""
    unknown = sorted(set(overrides) - set(BY_NAME))
    if unknown:
        raise TypeError(f"unknown statestore setting(s) {unknown}; known: {sorted(BY_NAME)}")
    existing = existing or {}
    for key in sorted(k for k in existing if k.startswith(PREFIX) and k not in BY_KEY):
        known = ", ".join(sorted(k.removeprefix(PREFIX) for k in BY_KEY if k.startswith(PREFIX)))
        raise SettingError(
            f"unknown statestore setting {key} (set to {existing[key]!r}); known under {PREFIX}: {known}"
        )
    confs: dict[str, str] = {}
    for s in SETTINGS:
        if s.name in overrides:
            if overrides[s.name] is not None:
                confs[s.key] = s.conf(overrides[s.name])
        elif s.key in existing:
            confs[s.key] = s.conf(existing[s.key], given_as=s.key)
        elif s.default is not None:
            confs[s.key] = s.default
    return confs
