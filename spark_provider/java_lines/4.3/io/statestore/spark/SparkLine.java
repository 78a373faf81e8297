package io.statestore.spark;

import org.apache.spark.sql.execution.streaming.runtime.StreamingQueryWrapper;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreConf;
import org.apache.spark.sql.execution.streaming.state.StateStoreCoordinatorRef;
import org.apache.spark.sql.execution.streaming.state.StateStoreCustomMetric;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreMetrics;
import org.apache.spark.sql.execution.streaming.state.StateStoreProviderId;
import org.apache.spark.sql.execution.streaming.state.StateStoreCustomSizeMetric;
import org.apache.spark.sql.streaming.StreamingQuery;

/**
 * What differs between Spark lines, for Spark 4.3 (spark_provider/java_lines/README.md): the jar for this line is
 * the common sources (spark_provider/java) and this class.
 */
final class SparkLine {
  /** The Spark line this jar is built for. */
  static final String LINE = "4.3";

  private SparkLine() {}

  /** A size metric (4.3 adds whether it is reported per store instance: ours are not). */
  static StateStoreCustomMetric sizeMetric(String name, String description) {
    return new StateStoreCustomSizeMetric(name, description, false);
  }

  /** The resolved checkpoint root of a running query (the session's handle wraps the engine's). */
  static String resolvedCheckpointRoot(StreamingQuery query) {
    return query instanceof StreamingQueryWrapper w ? w.streamingQuery().resolvedCheckpointRoot() : null;
  }

  /** Store metrics: the key count, memory and our custom metrics (no per-instance metrics). */
  static StateStoreMetrics storeMetrics(long keys, long memoryBytes,
      scala.collection.immutable.Map<StateStoreCustomMetric, Object> custom) {
    return new StateStoreMetrics(keys, memoryBytes, custom, Scala.map(new java.util.HashMap<>()));
  }

  /** Runs the StateStore trait's initializer on {@code store}. */
  static void initStore(StateStore store) {
    StateStore.$init$(store);
  }

  /** Whether the session validates commits through the coordinator. */
  static boolean commitValidationEnabled(StateStoreConf conf) {
    return conf.commitValidationEnabled();
  }

  /** Reports a commit to the coordinator for commit validation. */
  static void reportCommit(long version, StateStoreId id, org.apache.hadoop.conf.Configuration hadoopConf) {
    StateStore.reportCommitToCoordinator(version, id, hadoopConf);
  }

  /** Tells the coordinator a snapshot of {@code id} was uploaded (it tracks lagging snapshot uploads). */
  static void snapshotUploaded(StateStoreCoordinatorRef coordinator, StateStoreProviderId id, long version,
      long timestampMs) {
    coordinator.snapshotUploaded(id, version, timestampMs);
  }
}
