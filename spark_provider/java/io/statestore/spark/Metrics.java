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
  static final StateStoreCustomMetric COMMIT_PREPARE_TIME = new StateStoreCustomTimingMetric(
      "statestoreCommitPrepareMs", "statestore: commit time to close the version and build its increment");
  static final StateStoreCustomMetric COMMIT_ENCODE_TIME = new StateStoreCustomTimingMetric(
      "statestoreCommitEncodeMs", "statestore: commit time to encode and compress the increment");
  static final StateStoreCustomMetric COMMIT_WRITE_TIME = new StateStoreCustomTimingMetric(
      "statestoreCommitWriteMs", "statestore: commit time to write the increment durably");
  static final StateStoreCustomMetric SNAPSHOT_FLUSH_TIME = new StateStoreCustomTimingMetric(
      "statestoreSnapshotFlushMs", "statestore: last background snapshot, memtable flush (off the commit path)");
  static final StateStoreCustomMetric SNAPSHOT_CHECKPOINT_TIME = new StateStoreCustomTimingMetric(
      "statestoreSnapshotCheckpointMs", "statestore: last background snapshot, local checkpoint between commits");
  static final StateStoreCustomMetric SNAPSHOT_UPLOAD_TIME = new StateStoreCustomTimingMetric(
      "statestoreSnapshotUploadMs", "statestore: last background snapshot, upload to the checkpoint location");
  static final StateStoreCustomMetric LOAD_TIME =
      new StateStoreCustomTimingMetric("statestoreLoadTimeMs", "statestore: time to load or restore the store");
  static final StateStoreCustomMetric LOAD_VERSIONS_APPLIED = new StateStoreCustomSumMetric(
      "statestoreLoadVersionsApplied", "statestore: increments applied by loads to reach the version asked for");
  static final StateStoreCustomMetric LOAD_OVERLAY_WRITES = new StateStoreCustomSumMetric(
      "statestoreLoadOverlayWrites", "statestore: writes batches made into an overlay before the last increment of "
      + "their load was applied (partial merge)");
  static final StateStoreCustomMetric LOAD_INCREMENT_PENDING_TIME = new StateStoreCustomTimingMetric(
      "statestoreLoadIncrementPendingMs", "statestore: time a load's last increment was still being applied after "
      + "the batch started (partial merge)");
  static final StateStoreCustomMetric LOAD_OPENED_AHEAD = new StateStoreCustomSumMetric(
      "statestoreLoadOpenedAhead", "statestore: partitions whose state came from a replica copy opened ahead of "
      + "their move");
  /** Per source, how many partitions' last load took their state from it (local, replica, peer, checkpoint). */
  static final java.util.Map<StateLoader.Source, StateStoreCustomMetric> LOAD_SOURCE = loadSources();

  private static java.util.Map<StateLoader.Source, StateStoreCustomMetric> loadSources() {
    java.util.Map<StateLoader.Source, StateStoreCustomMetric> m = new java.util.EnumMap<>(StateLoader.Source.class);
    for (StateLoader.Source s : StateLoader.Source.values()) {
      String label = s.label();
      String name = "statestoreLoadSource" + Character.toUpperCase(label.charAt(0)) + label.substring(1);
      m.put(s, new StateStoreCustomSumMetric(name, "statestore: partitions whose state was loaded from " + label));
    }
    return java.util.Collections.unmodifiableMap(m);
  }

  /** A size metric; Spark 4.3's constructor adds whether it is reported per store instance (ours are not). */
  private static StateStoreCustomMetric sizeMetric(String name, String description) {
    try {
      try {
        return StateStoreCustomSizeMetric.class.getConstructor(String.class, String.class, boolean.class)
            .newInstance(name, description, false);
      } catch (NoSuchMethodException before43) {
        return StateStoreCustomSizeMetric.class.getConstructor(String.class, String.class)
            .newInstance(name, description);
      }
    } catch (ReflectiveOperationException e) {
      throw new IllegalStateException("this Spark's StateStoreCustomSizeMetric has no known constructor", e);
    }
  }

  static final StateStoreCustomMetric SST_BYTES =
      sizeMetric("statestoreSstBytes", "statestore: size of local SST files");

  static final StateStoreCustomMetric MEMORY_BYTES = sizeMetric("statestoreMemoryBytes",
      "statestore: RocksDB memory of the executors' stores (block cache and, bounded, write buffers)");

  static final List<StateStoreCustomMetric> ALL = all();

  private static List<StateStoreCustomMetric> all() {
    java.util.List<StateStoreCustomMetric> l = new java.util.ArrayList<>(List.of(INCREMENT_BYTES, INCREMENT_RECORDS,
        COMMIT_TIME, COMMIT_PREPARE_TIME, COMMIT_ENCODE_TIME, COMMIT_WRITE_TIME, SNAPSHOT_FLUSH_TIME,
        SNAPSHOT_CHECKPOINT_TIME, SNAPSHOT_UPLOAD_TIME, LOAD_TIME, LOAD_VERSIONS_APPLIED, LOAD_OVERLAY_WRITES,
        LOAD_OPENED_AHEAD, LOAD_INCREMENT_PENDING_TIME));
    l.addAll(LOAD_SOURCE.values());
    l.add(SST_BYTES);
    l.add(MEMORY_BYTES);
    return List.copyOf(l);
  }

  private Metrics() {}
}
