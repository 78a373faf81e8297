package io.statestore.spark;

import org.apache.spark.sql.execution.streaming.state.StateStoreConf;

/** Every setting of the provider in one place, read from the session's state store confs. */
final class ProviderSettings {
  static final String PREFIX = "spark.sql.streaming.stateStore.statestore.";

  final String localDir;
  final int zstdLevel;
  final long writeBufferSizeMb;
  final long blockCacheSizeMb;
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
  /** Tests only: the file that arms a fault point ({@link Faults}); null: no fault point is ever checked. */
  final String faultsFile;

  private ProviderSettings(java.util.function.Function<String, String> confs, int minDeltasForSnapshot,
      int minVersionsToRetain, boolean commitValidation) {
    localDir = get(confs, "localDir", System.getProperty("java.io.tmpdir") + "/statestore-provider");
    String compression = get(confs, "incrementCompression", "zstd");
    int level = Integer.parseInt(get(confs, "zstdLevel", "1"));
    zstdLevel = "none".equalsIgnoreCase(compression) ? 0 : Math.max(1, level);
    writeBufferSizeMb = Long.parseLong(get(confs, "writeBufferSizeMB", "64"));
    blockCacheSizeMb = Long.parseLong(get(confs, "blockCacheSizeMB", "64"));
    this.minDeltasForSnapshot = Math.max(1, minDeltasForSnapshot);
    this.minVersionsToRetain = Math.max(1, minVersionsToRetain);
    this.commitValidation = commitValidation;
    replicationFactor = Integer.parseInt(get(confs, "replicationFactor", "1"));
    syncReplication = Boolean.parseBoolean(get(confs, "sync", "false"));
    nodeSocket = emptyToNull(get(confs, "nodeSocket", ""));
    controller = emptyToNull(get(confs, "controller", ""));
    materializeTimeoutMs = Long.parseLong(get(confs, "materializeTimeoutMs", "10000"));
    peerFetch = get(confs, "peerFetch", "auto").toLowerCase(java.util.Locale.ROOT);
    faultsFile = emptyToNull(get(confs, "faultsFile", ""));
    partialMerge = Boolean.parseBoolean(get(confs, "partialMerge", "true"));
    openAhead = Boolean.parseBoolean(get(confs, "openAhead", "true"));
    warmUpMbPerSecond = Double.parseDouble(get(confs, "warmUpMBPerSecond", "64"));
    if (!(warmUpMbPerSecond > 0)) {
      throw new IllegalArgumentException("statestore: " + PREFIX + "warmUpMBPerSecond is " + warmUpMbPerSecond
          + "; expected a rate over 0 (MiB per second)");
    }
    if (!java.util.Set.of("auto", "always", "never").contains(peerFetch)) {
      throw new IllegalArgumentException("statestore: " + PREFIX + "peerFetch is '" + peerFetch
          + "'; expected auto, always or never");
    }
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

  private static String get(java.util.function.Function<String, String> confs, String name, String dflt) {
    String v = confs.apply(PREFIX + name);
    return v != null ? v.trim() : dflt;
  }
}
