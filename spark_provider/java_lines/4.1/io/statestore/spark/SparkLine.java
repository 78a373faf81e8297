package io.statestore.spark;

import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreConf;
import org.apache.spark.sql.execution.streaming.state.StateStoreCoordinatorRef;
import org.apache.spark.sql.execution.streaming.state.StateStoreCustomMetric;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreMetrics;
import org.apache.spark.sql.execution.streaming.state.StateStoreProviderId;

/**
 * What differs between Spark lines, for Spark 4.1, 4.2 and 4.3 (spark_provider/java_lines/README.md): the jar
 * of each of these lines is the common sources (spark_provider/java) and this class.
 */
final class SparkLine {
  private SparkLine() {}

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

  /**
   * Refuses an empty list of values where the line's own RocksDB provider does: Spark 4.1's putList and mergeList
   * take none, 4.2 and later take one (a key holding no values), and ours does as that line's provider does.
   */
  static void checkListAccepted(String operation, int values) {
    if (values == 0 && org.apache.spark.package$.MODULE$.SPARK_VERSION().startsWith("4.1.")) {
      throw new IllegalArgumentException(operation + " of an empty list: Spark 4.1 takes at least one value");
    }
  }

  /** The query run a provider serves: Spark 4 sets it in the Hadoop conf it passes to init. */
  static String runId(org.apache.hadoop.conf.Configuration hadoopConf) {
    return hadoopConf.get("sql.streaming.runId", "");
  }
}
