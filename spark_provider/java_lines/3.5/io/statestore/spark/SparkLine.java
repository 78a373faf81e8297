package io.statestore.spark;

import org.apache.spark.sql.execution.streaming.state.StateStoreConf;
import org.apache.spark.sql.execution.streaming.state.StateStoreCoordinatorRef;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreProviderId;

/**
 * What the core asks of a Spark line, for Spark 3.5 (spark_provider/java_lines/README.md): the jar for this line is
 * the core (spark_provider/java) and this directory, which also holds 3.5's provider contract.
 */
final class SparkLine {
  private SparkLine() {}

  /** Spark 3.5 has no commit validation. */
  static boolean commitValidationEnabled(StateStoreConf conf) {
    return false;
  }

  /** Spark 3.5 has no commit validation: nothing to report. */
  static void reportCommit(long version, StateStoreId id, org.apache.hadoop.conf.Configuration hadoopConf) {}

  /** Spark 3.5's coordinator does not track snapshot uploads. */
  static void snapshotUploaded(StateStoreCoordinatorRef coordinator, StateStoreProviderId id, long version,
      long timestampMs) {}

  /**
   * The query run a provider serves. Spark 3.5 does not set it in the Hadoop conf it passes to init, but a streaming
   * query runs each batch's jobs in a job group named by its run id ("" outside a query's task).
   */
  static String runId(org.apache.hadoop.conf.Configuration hadoopConf) {
    String id = hadoopConf.get("sql.streaming.runId", "");
    if (!id.isEmpty()) return id;
    org.apache.spark.TaskContext task = org.apache.spark.TaskContext.get();
    String group = task == null ? null : task.getLocalProperty("spark.jobGroup.id");
    if (group == null) return "";
    try {
      return java.util.UUID.fromString(group).toString().equals(group) ? group : "";
    } catch (IllegalArgumentException e) {
      return "";
    }
  }
}
