package io.statestore.spark;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.streaming.state.KeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.StateSchemaProvider;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreConf;
import org.apache.spark.sql.execution.streaming.state.StateStoreCustomMetric;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreProvider;
import org.apache.spark.sql.execution.streaming.state.SupportsFineGrainedReplay;
import org.apache.spark.sql.types.StructType;

/**
 * Spark's entry point on Spark 4 (4.0 to 4.3): one instance per store partition, Spark 4's provider contract
 * (column families, checkpoint ids, fine-grained replay and the change feed for the state data source) over
 * {@link ProviderCore}. Methods of one line's contract only carry no {@code @Override}: each line's jar compiles
 * these sources against that line's Spark (spark_provider/java_lines/README.md); there they implement it,
 * elsewhere they are unused overloads.
 */
public final class StatestoreProvider extends ProviderCore implements StateStoreProvider, SupportsFineGrainedReplay {
  private ReentrantReadWriteLock maintenanceLock;
  private boolean unloaded;
  /** Each column family's codec, by name (the default one from init, the others as the operator creates them). */
  private final Map<String, RowCodec> codecs = new ConcurrentHashMap<>();

  public StatestoreProvider() {
    StateStoreProvider.$init$(this);
  }

  public void org$apache$spark$sql$execution$streaming$state$StateStoreProvider$_setter_$maintenanceLock_$eq(
      ReentrantReadWriteLock lock) {
    this.maintenanceLock = lock;
  }

  public ReentrantReadWriteLock maintenanceLock() {
    return maintenanceLock;
  }

  public boolean unloaded() {
    return unloaded;
  }

  public void unloaded_$eq(boolean value) {
    unloaded = value;
  }

  @Override
  public void init(StateStoreId id, StructType keySchema, StructType valueSchema, KeyStateEncoderSpec spec,
      boolean useColumnFamilies, StateStoreConf storeConf, Configuration hadoopConf, boolean multipleValuesPerKey,
      scala.Option<StateSchemaProvider> schemaProvider) {
    initCore(id, storeConf, hadoopConf);
    codecs.put(LocalStore.DEFAULT_CF, RowCodecs.of(keySchema, valueSchema, spec, multipleValuesPerKey));
  }

  RowCodec codec(String cf) {
    return codecs.get(cf);
  }

  void registerCodec(String cf, RowCodec codec) {
    codecs.putIfAbsent(cf, codec);
  }

  public StateStore getStore(long version, scala.Option<String> uniqueId, boolean forceSnapshotOnCommit,
      boolean loadEmpty) {
    if (version >= 0 && loadEmpty) {
      throw new UnsupportedOperationException("statestore: loading store " + storeIdString() + " empty at version "
          + version + " (loadEmpty) is not supported; streaming queries never ask for it");
    }
    return new StatestoreStore(this, loadForTask(version, uniqueId, forceSnapshotOnCommit));
  }

  /** Spark 4.0 and 4.1's getStore: no snapshot asked for at the commit, never an empty load. */
  public StateStore getStore(long version, scala.Option<String> uniqueId) {
    return getStore(version, uniqueId, false, false);
  }

  /** Spark 4.0's replay from a snapshot (no checkpoint unique ids). */
  public StateStore replayStateFromSnapshot(long snapshotVersion, long endVersion) {
    return replayStateFromSnapshot(snapshotVersion, endVersion, false, scala.Option.empty(), scala.Option.empty());
  }

  /** Spark's state data source with {@code snapshotStartBatchId} ({@link ProviderCore#replayFromSnapshot}). */
  public StateStore replayStateFromSnapshot(long snapshotVersion, long endVersion, boolean readOnly,
      scala.Option<String> startUniqueId, scala.Option<String> endUniqueId) {
    return new StatestoreStore(this, replayFromSnapshot(snapshotVersion, endVersion, endUniqueId));
  }

  /** Spark 4.0's change feed (no checkpoint unique id). */
  public org.apache.spark.util.NextIterator<scala.Tuple4<scala.Enumeration.Value, UnsafeRow, UnsafeRow, Object>>
      getStateStoreChangeDataReader(long startVersion, long endVersion, scala.Option<String> columnFamily) {
    return getStateStoreChangeDataReader(startVersion, endVersion, columnFamily, scala.Option.empty());
  }

  /**
   * Spark's state data source with {@code readChangeFeed}: the records of versions {@code startVersion..endVersion}
   * of one column family (the default one when none is named), read from the increments ({@link ChangeFeed}).
   */
  public org.apache.spark.util.NextIterator<scala.Tuple4<scala.Enumeration.Value, UnsafeRow, UnsafeRow, Object>>
      getStateStoreChangeDataReader(long startVersion, long endVersion, scala.Option<String> columnFamily,
      scala.Option<String> endUniqueId) {
    if (startVersion < 1 || endVersion < startVersion) {
      throw new IllegalArgumentException("statestore: cannot read the change feed of store " + storeIdString()
          + " from version " + startVersion + " to " + endVersion + ": versions start at 1 and the start must not "
          + "be past the end (changeStartBatchId <= changeEndBatchId)");
    }
    String cf = columnFamily.isDefined() ? columnFamily.get() : LocalStore.DEFAULT_CF;
    RowCodec codec = codecs.get(cf);
    if (codec == null) {
      throw new IllegalArgumentException("statestore: store " + storeIdString() + " has no column family '" + cf
          + "' known to this reader; it knows " + codecs.keySet());
    }
    return new ChangeFeed(checkpoint(), cf, codec, startVersion, endVersion);
  }

  @Override
  public scala.collection.immutable.Seq<StateStoreCustomMetric> supportedCustomMetrics() {
    return Scala.seq(Metrics.ALL);
  }
}
