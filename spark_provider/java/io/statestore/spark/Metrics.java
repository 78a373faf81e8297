package io.statestore.spark;

import java.util.List;
import org.apache.spark.sql.execution.streaming.state.StateStoreCustomMetric;
import org.apache.spark.sql.execution.streaming.state.StateStoreCustomSizeMetric;
import org.apache.spark.sql.execution.streaming.state.StateStoreCustomSumMetric;
import org.apache.spark.sql.execution.streaming.state.StateStoreCustomTimingMetric;

/** The provider's custom metrics, shown in Spark's UI and in the query progress. */
final class Metrics {
  static final StateStoreCustomMetric INCREMENT_BYTES =
      new StateStoreCustomSumMetric("statestoreIncrementBytes", "statestore: bytes of increments written");
  static final StateStoreCustomMetric INCREMENT_RECORDS =
      new StateStoreCustomSumMetric("statestoreIncrementRecords", "statestore: records in increments written");
  static final StateStoreCustomMetric COMMIT_TIME =
      new StateStoreCustomTimingMetric("statestoreCommitTimeMs", "statestore: time to commit (write increment)");
  static final StateStoreCustomMetric LOAD_TIME =
      new StateStoreCustomTimingMetric("statestoreLoadTimeMs", "statestore: time to load or restore the store");
  static final StateStoreCustomMetric SST_BYTES =
      new StateStoreCustomSizeMetric("statestoreSstBytes", "statestore: size of local SST files", false);

  static final List<StateStoreCustomMetric> ALL =
      List.of(INCREMENT_BYTES, INCREMENT_RECORDS, COMMIT_TIME, LOAD_TIME, SST_BYTES);

  private Metrics() {}
}
