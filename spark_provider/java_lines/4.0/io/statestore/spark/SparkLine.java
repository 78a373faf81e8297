package io.statestore.spark;

import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreConf;
import org.apache.spark.sql.execution.streaming.state.StateStoreCoordinatorRef;
import org.apache.spark.sql.execution.streaming.state.StateStoreCustomMetric;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreMetrics;
import org.apache.spark.sql.execution.streaming.state.StateStoreProviderId;

/**
 * What differs between Spark lines, for Spark 4.0 (spark_provider/java_lines/README.md): the jar for this line
 * is the common sources (spark_provider/java) and this class.
 */
final class SparkLine {
  private SparkLine() {}

  /** Store metrics: the key count, memory and our custom metrics (4.0 has no per-instance metrics). */
  static StateStoreMetrics storeMetrics(long keys, long memoryBytes,
      scala.collection.immutable.Map<StateStoreCustomMetric, Object> custom) {
    return new StateStoreMetrics(keys, memoryBytes, custom);
  }

  /** 4.0's StateStore trait has no initializer. */
  static void initStore(StateStore store) {}

  /** Spark 4.0 has no commit validation. */
  static boolean commitValidationEnabled(StateStoreConf conf) {
    return false;
  }

  /** Spark 4.0 has no commit validation: nothing to report. */
  static void reportCommit(long version, StateStoreId id, org.apache.hadoop.conf.Configuration hadoopConf) {}

  /** Spark 4.0's coordinator does not track snapshot uploads. */
  static void snapshotUploaded(StateStoreCoordinatorRef coordinator, StateStoreProviderId id, long version,
      long timestampMs) {}

  /** Spark 4.0's StateStore has no putList or mergeList: nothing calls them. */
  static void checkListAccepted(String operation, int values) {}

  /** The query run a provider serves: Spark 4 sets it in the Hadoop conf it passes to init. */
  static String runId(org.apache.hadoop.conf.Configuration hadoopConf) {
    return hadoopConf.get("sql.streaming.runId", "");
  }
}
