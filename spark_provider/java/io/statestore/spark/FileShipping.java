package io.statestore.spark;

import java.util.UUID;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Tells this executor's state node of each state file copy the host keeps ({@link ReplicaFiles}), so that the node
 * ships it to the partition's replica group on other hosts (FILE_KEPT, formats.md section 6) and reports itself the
 * partition's primary: the controller places, steers and shows partitions on Spark's own RocksDB provider as ours.
 * Off when replication is off (no node: {@code replicationFactor} 0, or neither a controller nor a node socket), and
 * outside an executor; never in the way of Spark's write, which only queues the notice.
 */
final class FileShipping {
  private static final Logger LOG = LoggerFactory.getLogger(FileShipping.class);
  private static volatile boolean resolved;
  private static LocalChannel channel;
  private static NodeSidecar.Spec spec;
  /** The query run of each state root, learnt on task threads (a snapshot's upload runs on Spark's maintenance
   * thread, which carries no TaskContext). */
  private static final java.util.Map<String, String> RUNS = new java.util.concurrent.ConcurrentHashMap<>();

  private FileShipping() {}

  /** The host kept {@code copy} of state file {@code file}, at checkpoint path {@code key} ({@code location} with its
   * scheme): queued for the node. */
  static void kept(String key, String location, StateFilePath file, ReplicaFiles.Copy copy) {
    LocalChannel c = channel();
    if (c == null) return;
    String partitionDir = key.substring(0, key.length() - file.name().length() - 1);
    String prefix = location.endsWith(key) ? location.substring(0, location.length() - key.length()) : "";
    String stateRoot = prefix + file.checkpointRoot() + "/state";
    String runId = runId();
    if (runId.isEmpty()) {
      runId = RUNS.getOrDefault(stateRoot, "");
    } else {
      RUNS.put(stateRoot, runId);
    }
    c.fileKept(new FrameCodec.FileKept(file.storeId(), partitionDir, key, file.name(), file.version(), copy.size(),
        copy.crc(), copy.file().getAbsolutePath(), runId, runId.isEmpty() ? "" : stateRoot,
        runId.isEmpty() ? "" : LocalChannel.executorId(), runId.isEmpty() ? "" : LocalChannel.executorHost(),
        copy.modified()), spec);
  }

  /** The load of state file {@code file} read {@code bytes} from {@code source} (FrameCodec's load sources): queued
   * for the node, which sums a load's reads per partition for {@code statestore status}. */
  static void read(StateFilePath file, long bytes, int source) {
    LocalChannel c = channel();
    if (c == null) return;
    c.fileRead(new FrameCodec.FileRead(file.storeId(), file.partitionDir(), file.name(), file.version(), bytes,
        source), spec);
  }

  /** The query run whose task this thread runs ("" off a task thread): a streaming query runs each batch's jobs in
   * a job group named by its run id. */
  private static String runId() {
    TaskContext task = TaskContext.get();
    String group = task == null ? null : task.getLocalProperty("spark.jobGroup.id");
    if (group == null) return "";
    try {
      return UUID.fromString(group).toString().equals(group) ? group : "";
    } catch (IllegalArgumentException e) {
      return "";
    }
  }

  private static LocalChannel channel() {
    if (resolved) return channel;
    synchronized (FileShipping.class) {
      if (resolved) return channel;
      SparkEnv env = SparkEnv.get();
      if (env == null) return null; // not in Spark yet: asked again at the next copy
      try {
        ProviderSettings settings = ProviderSettings.from(env.conf());
        channel = LocalChannel.of(settings);
        if (channel != null) spec = LocalChannel.sidecarSpec(settings);
      } catch (Exception e) {
        LOG.warn("statestore-fs: this executor's state node is not told of the copies it keeps ({}); they stay on "
            + "this host", e.toString());
        channel = null;
      }
      resolved = true;
      return channel;
    }
  }
}
