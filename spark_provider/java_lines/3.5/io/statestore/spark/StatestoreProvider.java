package io.statestore.spark;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreConf;
import org.apache.spark.sql.execution.streaming.state.StateStoreCustomMetric;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreProvider;
import org.apache.spark.sql.types.StructType;

/**
 * Spark's entry point on Spark 3.5: one instance per store partition, 3.5's provider contract (one key-value space
 * with an optional scan prefix, no checkpoint ids, no state data source) over {@link ProviderCore}.
 */
public final class StatestoreProvider extends ProviderCore implements StateStoreProvider {
  private RowCodec codec;

  public StatestoreProvider() {
    StateStoreProvider.$init$(this);
  }

  @Override
  public void init(StateStoreId id, StructType keySchema, StructType valueSchema, int numColsPrefixKey,
      StateStoreConf storeConf, Configuration hadoopConf) {
    initCore(id, storeConf, hadoopConf);
    codec = RowCodecs.of(keySchema, valueSchema, numColsPrefixKey);
  }

  @Override
  public StateStore getStore(long version) {
    return new StatestoreStore(this, loadForTask(version, scala.Option.empty(), false), codec);
  }

  @Override
  public scala.collection.Seq<StateStoreCustomMetric> supportedCustomMetrics() {
    return Scala.seq(Metrics.ALL);
  }
}
