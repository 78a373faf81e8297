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
    localDir = read.text("localDir", System.getProperty("java.io.tmpdir") + "/statestore-provider");
    String compression = read.choice("incrementCompression", "zstd", "zstd", "none");
    int level = (int) read.integer("zstdLevel", "1", 1, 22);
    zstdLevel = "none".equals(compression) ? 0 : level;
    writeBufferSizeMb = read.integer("writeBufferSizeMB", "64", 1, Integer.MAX_VALUE);
    blockCacheSizeMb = read.integer("blockCacheSizeMB", "64", 1, Integer.MAX_VALUE);
    memoryBudgetMb = read.integer("memoryBudgetMB", "256", 0, Integer.MAX_VALUE);
    nodeMemoryBudgetMb = read.integer("nodeMemoryBudgetMB", "128", 0, Integer.MAX_VALUE);
    this.minDeltasForSnapshot = Math.max(1, minDeltasForSnapshot);
    this.minVersionsToRetain = Math.max(1, minVersionsToRetain);
    this.commitValidation = commitValidation;
    replicationFactor = (int) read.integer("replicationFactor", "1", 0, Integer.MAX_VALUE);
    syncReplication = read.flag("sync", "false");
    nodeSocket = emptyToNull(read.text("nodeSocket", ""));
    controller = emptyToNull(read.address("controller"));
    materializeTimeoutMs = read.integer("materializeTimeoutMs", "10000", 0, Integer.MAX_VALUE);
    peerFetch = read.choice("peerFetch", "auto", "auto", "always", "never");
    faultsFile = emptyToNull(read.text("faultsFile", ""));
    partialMerge = read.flag("partialMerge", "true");
    openAhead = read.flag("openAhead", "true");
    warmUpMbPerSecond = read.numberOver("warmUpMBPerSecond", "64", 0);
    nodePort = (int) read.integer("nodePort", "0", 0, 65535 - NodeSidecar.PORT_RETRIES);
    secret = emptyToNull(read.text("secret", ""));
    tlsCert = emptyToNull(read.text("tlsCert", ""));
    tlsKey = emptyToNull(read.text("tlsKey", ""));
    tlsCa = emptyToNull(read.text("tlsCa", ""));
  }

  static ProviderSettings from(StateStoreConf conf) {
    scala.collection.immutable.Map<String, String> sql = conf.sqlConfs();
    return new ProviderSettings(key -> {
      scala.Option<String> v = sql.get(key);
      return v.isDefined() ? v.get() : null;
    }, conf.minDeltasForSnapshot(), conf.minVersionsToRetain(), conf.commitValidationEnabled());
  }

  /** The settings as the application's SparkConf has them (an executor plugin's view: no session yet). */
  static ProviderSettings from(org.apache.spark.SparkConf conf) {
    return new ProviderSettings(key -> conf.contains(key) ? conf.get(key) : null, 10, 100, true);
  }

  private static String emptyToNull(String value) {
    return value.isEmpty() ? null : value;
  }

  /**
   * Reads and checks the confs under {@link #PREFIX}. A bad value is an IllegalArgumentException with the words
   * of spark_provider/setting_values.py: "statestore setting KEY is 'VALUE': expected ..." (a test compares them).
   */
  private static final class Reader {
    private final java.util.function.Function<String, String> confs;

    Reader(java.util.function.Function<String, String> confs) {
      this.confs = confs;
    }

    String text(String name, String dflt) {
      String v = confs.apply(PREFIX + name);
      return v != null ? v.trim() : dflt;
    }

    String choice(String name, String dflt, String... allowed) {
      String raw = text(name, dflt);
      String word = raw.toLowerCase(java.util.Locale.ROOT);
      if (!java.util.List.of(allowed).contains(word)) throw bad(name, raw, "one of " + String.join(", ", allowed));
      return word;
    }

    boolean flag(String name, String dflt) {
      String raw = text(name, dflt);
      String word = raw.toLowerCase(java.util.Locale.ROOT);
      if (!word.equals("true") && !word.equals("false")) throw bad(name, raw, "true or false");
      return word.equals("true");
    }

    long integer(String name, String dflt, long low, long high) {
      String raw = text(name, dflt);
      String expected = high == Integer.MAX_VALUE // the Python side's "at least": up to 2**31 - 1
          ? "an integer of at least " + low : "an integer from " + low + " to " + high;
      long value;
      try {
        value = Long.parseLong(raw.startsWith("+") ? raw.substring(1) : raw);
      } catch (NumberFormatException e) {
        throw bad(name, raw, expected);
      }
      if (value < low || value > high) throw bad(name, raw, expected);
      return value;
    }

    double numberOver(String name, String dflt, long low) {
      String raw = text(name, dflt);
      String expected = "a number over " + low;
      double value;
      try {
        value = Double.parseDouble(raw);
      } catch (NumberFormatException e) {
        throw bad(name, raw, expected);
      }
      if (!Double.isFinite(value) || value <= low) throw bad(name, raw, expected);
      return value;
    }

    String address(String name) {
      String raw = text(name, "");
      if (raw.isEmpty()) return raw;
      int colon = raw.lastIndexOf(':');
      String port = colon > 0 ? raw.substring(colon + 1) : "";
      if (!port.matches("[0-9]{1,5}") || Integer.parseInt(port) < 1 || Integer.parseInt(port) > 65535) {
        throw bad(name, raw, "host:port with a port from 1 to 65535");
      }
      return raw;
    }

    private static IllegalArgumentException bad(String name, String raw, String expected) {
      return new IllegalArgumentException(
          "statestore setting " + PREFIX + name + " is '" + raw + "': expected " + expected);
    }
  }
}
