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

  private ProviderSettings(StateStoreConf conf) {
    scala.collection.immutable.Map<String, String> confs = conf.sqlConfs();
    localDir = get(confs, "localDir", System.getProperty("java.io.tmpdir") + "/statestore-provider");
    String compression = get(confs, "incrementCompression", "zstd");
    int level = Integer.parseInt(get(confs, "zstdLevel", "1"));
    zstdLevel = "none".equalsIgnoreCase(compression) ? 0 : Math.max(1, level);
    writeBufferSizeMb = Long.parseLong(get(confs, "writeBufferSizeMB", "64"));
    blockCacheSizeMb = Long.parseLong(get(confs, "blockCacheSizeMB", "64"));
    minDeltasForSnapshot = Math.max(1, conf.minDeltasForSnapshot());
    minVersionsToRetain = Math.max(1, conf.minVersionsToRetain());
    commitValidation = conf.commitValidationEnabled();
  }

  static ProviderSettings from(StateStoreConf conf) {
    return new ProviderSettings(conf);
  }

  private static String get(scala.collection.immutable.Map<String, String> confs, String name, String dflt) {
    scala.Option<String> v = confs.get(PREFIX + name);
    return v.isDefined() ? v.get().trim() : dflt;
  }
}
