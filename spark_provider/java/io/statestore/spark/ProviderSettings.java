package io.statestore.spark;

import org.apache.spark.sql.execution.streaming.state.StateStoreConf;

/** Every setting of the provider in one place, read from the session's state store confs. */
final class ProviderSettings {
  static final String PREFIX = "spark.sql.streaming.stateStore.statestore.";

  final String localDir;
  final int zstdLevel;
  final long writeBufferSizeMb;
  final long blockCacheSizeMb;
  /** RocksDB memory of this JVM's stores, block cache and write buffers together; 0: unbounded. */
  final long memoryBudgetMb;
  /** RocksDB memory of the state node's replicas, handed to the sidecar this JVM starts; 0: unbounded. */
  final long nodeMemoryBudgetMb;
  final long nodeMaxOpenReplicas;
  final int minDeltasForSnapshot;
  final int minVersionsToRetain;
  final boolean commitValidation;
  /** Replicas per partition (q); 0 turns the state node off. */
  final int replicationFactor;
  /** Whether a commit waits until one replica acked its increment. */
  final boolean syncReplication;
  /** Socket of a node run as a service; null: this JVM starts a sidecar node. */
  final String nodeSocket;
  /** Address of the controller (set by spark_provider.enable); null: none. */
  final String controller;
  /** Longest a load waits for the state node's copy of a partition before restoring from the checkpoint. */
  final long materializeTimeoutMs;
  /** Whether a node without a replica may fetch the partition from a peer: auto (only for a checkpoint location
   * that is not a local file system), always, never. */
  final String peerFetch;
  /**
   * Whether a load from the state node's copy that lacks only the last increment (hand-over: the previous
   * primary's last increment still in flight) hands the task the copy at once, with an overlay taking the batch's
   * writes while that increment is read and applied in the background (DESIGN.md section 4, partial-state merge;
   * {@link PartialMerge}). Off: the load applies it first.
   */
  final boolean partialMerge;
  /**
   * Whether the executor opens its node's replica of a partition a planned hand-over moves here before the batch
   * that moves it ({@link PreparedStores}), so that batch's task does not wait for the copy to be written and
   * opened. Off: the task's load asks the node then.
   */
  final boolean openAhead;
  /**
   * The warm-up throttle: how fast this executor's state node sends a whole replica to a node that holds none
   * (a new executor, a drained one's replacement), in MiB/s, so that the copies do not slow the running query.
   */
  final double warmUpMbPerSecond;
  /** The port this executor's state node listens on (the next 16 if taken); 0: any free port. */
  final int nodePort;
  /**
   * The application's secret (statestore.auth), handed to the state node this JVM starts in its environment;
   * null: none (the node then accepts every call).
   */
  final String secret;
  /** TLS PEM files (statestore.tls) for the state node this JVM starts, in its environment; null: unset. */
  final String tlsCert;
  final String tlsKey;
  final String tlsCa;
  /** Tests only: the file that arms a fault point ({@link Faults}); null: no fault point is ever checked. */
  final String faultsFile;

  private ProviderSettings(java.util.function.Function<String, String> confs, int minDeltasForSnapshot,
      int minVersionsToRetain, boolean commitValidation) {
    Reader read = new Reader(confs);
    localDir = read.text(SettingsTable.LOCAL_DIR, System.getProperty("java.io.tmpdir") + "/statestore-provider");
    String compression = read.choice(SettingsTable.INCREMENT_COMPRESSION);
    int level = (int) read.integer(SettingsTable.ZSTD_LEVEL);
    zstdLevel = "none".equals(compression) ? 0 : level;
    writeBufferSizeMb = read.integer(SettingsTable.WRITE_BUFFER_SIZE_MB);
    blockCacheSizeMb = read.integer(SettingsTable.BLOCK_CACHE_SIZE_MB);
    memoryBudgetMb = read.integer(SettingsTable.MEMORY_BUDGET_MB);
    nodeMemoryBudgetMb = read.integer(SettingsTable.NODE_MEMORY_BUDGET_MB);
    nodeMaxOpenReplicas = read.integer(SettingsTable.NODE_MAX_OPEN_REPLICAS);
    this.minDeltasForSnapshot = Math.max(1, minDeltasForSnapshot);
    this.minVersionsToRetain = Math.max(1, minVersionsToRetain);
    this.commitValidation = commitValidation;
    replicationFactor = (int) read.integer(SettingsTable.REPLICATION_FACTOR);
    syncReplication = read.flag(SettingsTable.SYNC);
    nodeSocket = emptyToNull(read.text(SettingsTable.NODE_SOCKET));
    controller = emptyToNull(read.address(SettingsTable.CONTROLLER));
    materializeTimeoutMs = read.integer(SettingsTable.MATERIALIZE_TIMEOUT_MS);
    peerFetch = read.choice(SettingsTable.PEER_FETCH);
    faultsFile = emptyToNull(read.text(SettingsTable.FAULTS_FILE));
    partialMerge = read.flag(SettingsTable.PARTIAL_MERGE);
    openAhead = read.flag(SettingsTable.OPEN_AHEAD);
    warmUpMbPerSecond = read.number(SettingsTable.WARM_UP_MB_PER_SECOND);
    nodePort = (int) read.integer(SettingsTable.NODE_PORT);
    secret = emptyToNull(read.text(SettingsTable.SECRET));
    tlsCert = emptyToNull(read.text(SettingsTable.TLS_CERT));
    tlsKey = emptyToNull(read.text(SettingsTable.TLS_KEY));
    tlsCa = emptyToNull(read.text(SettingsTable.TLS_CA));
  }

  /** The port of the controller the driver plugin starts ({@code controllerPort}; 0: any free port). */
  static int controllerPort(org.apache.spark.SparkConf conf) {
    return (int) new Reader(key -> conf.contains(key) ? conf.get(key) : null).integer(SettingsTable.CONTROLLER_PORT);
  }

  static ProviderSettings from(StateStoreConf conf) {
    scala.collection.immutable.Map<String, String> sql = conf.sqlConfs();
    return new ProviderSettings(key -> {
      scala.Option<String> v = sql.get(key);
      return v.isDefined() ? v.get() : null;
    }, conf.minDeltasForSnapshot(), conf.minVersionsToRetain(), SparkLine.commitValidationEnabled(conf));
  }

  /** The settings as the application's SparkConf has them (an executor plugin's view: no session yet). */
  static ProviderSettings from(org.apache.spark.SparkConf conf) {
    return new ProviderSettings(key -> conf.contains(key) ? conf.get(key) : null, 10, 100, true);
  }

  private static String emptyToNull(String value) {
    return value.isEmpty() ? null : value;
  }

  /**
   * Reads and checks the confs of {@link SettingsTable} (generated from protos/contract/provider_settings.toml with
   * spark_provider/settings_table.py). A bad value is an IllegalArgumentException in the words the Python side uses:
   * "statestore setting KEY is 'VALUE': expected ..." (tests/test_settings.py compares them).
   */
  private static final class Reader {
    private final java.util.function.Function<String, String> confs;

    Reader(java.util.function.Function<String, String> confs) {
      this.confs = confs;
    }

    String text(SettingsTable.Setting s, String dflt) {
      String v = confs.apply(s.key());
      return v != null ? v.trim() : dflt;
    }

    String text(SettingsTable.Setting s) {
      return text(s, s.defaultValue() != null ? s.defaultValue() : "");
    }

    String choice(SettingsTable.Setting s) {
      String raw = text(s);
      String word = raw.toLowerCase(java.util.Locale.ROOT);
      if (!s.values().contains(word)) throw bad(s, raw);
      return word;
    }

    boolean flag(SettingsTable.Setting s) {
      String raw = text(s);
      String word = raw.toLowerCase(java.util.Locale.ROOT);
      if (!word.equals("true") && !word.equals("false")) throw bad(s, raw);
      return word.equals("true");
    }

    long integer(SettingsTable.Setting s) {
      String raw = text(s);
      long value;
      try {
        value = Long.parseLong(raw.startsWith("+") ? raw.substring(1) : raw);
      } catch (NumberFormatException e) {
        throw bad(s, raw);
      }
      if (value < s.low() || value > s.high()) throw bad(s, raw);
      return value;
    }

    double number(SettingsTable.Setting s) {
      String raw = text(s);
      double value;
      try {
        value = Double.parseDouble(raw);
      } catch (NumberFormatException e) {
        throw bad(s, raw);
      }
      if (!Double.isFinite(value) || value < s.low() || (value == s.low() && !s.inclusive())) throw bad(s, raw);
      return value;
    }

    String address(SettingsTable.Setting s) {
      String raw = text(s);
      if (raw.isEmpty()) return raw;
      int colon = raw.lastIndexOf(':');
      String port = colon > 0 ? raw.substring(colon + 1) : "";
      if (!port.matches("[0-9]{1,5}") || Integer.parseInt(port) < 1 || Integer.parseInt(port) > 65535) {
        throw bad(s, raw);
      }
      return raw;
    }

    private static IllegalArgumentException bad(SettingsTable.Setting s, String raw) {
      return new IllegalArgumentException("statestore setting " + s.key() + " is '" + raw + "': expected "
          + s.expected());
    }
  }
}
