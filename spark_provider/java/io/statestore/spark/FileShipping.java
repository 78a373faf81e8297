package io.statestore.spark;

import java.io.IOException;
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
  private static long fetchTimeoutMs;
  /** A load's later misses of a partition's files within this long of a fetch from a peer do not ask again. */
  private static final long FETCH_AGAIN_MS = 10_000;
  /** Each partition directory's last fetch from a peer: done once it holds its answer (whether any file came). */
  private static final java.util.Map<String, Fetch> FETCHES = new java.util.concurrent.ConcurrentHashMap<>();

  private record Fetch(long startedAt, java.util.concurrent.CompletableFuture<Boolean> done) {}
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

  /**
   * This host holds no trusted copy of state file {@code file}, which a load is about to read from the checkpoint
   * location: asks this executor's state node to fetch the partition's files from a peer node holding them
   * (FETCH_FILES; the partition's task runs on a host its replicas are not on: Real-Time Mode, a steer that did not
   * hold). Once per partition per {@link #FETCH_AGAIN_MS}: a load's later misses, and loads of the partition on
   * other threads meanwhile, wait for that one fetch. Returns whether files may have arrived (the caller looks for a
   * trusted copy again); false at once when there is no node or the node fetched nothing.
   */
  static boolean fetchFromPeers(StateFilePath file) {
    LocalChannel c = channel();
    if (c == null) return false;
    String partition = file.partitionDir();
    long now = System.currentTimeMillis();
    java.util.concurrent.CompletableFuture<Boolean> mine = new java.util.concurrent.CompletableFuture<>();
    Fetch fetch = FETCHES.compute(partition, (k, last) ->
        last != null && (!last.done().isDone() || now - last.startedAt() < FETCH_AGAIN_MS) ? last
            : new Fetch(now, mine));
    if (fetch.done() != mine) {
      try {
        return fetch.done().get(fetchTimeoutMs + 1000, java.util.concurrent.TimeUnit.MILLISECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt(); // a cancelled task stops loading
        return false;
      } catch (Exception e) {
        return false;
      }
    }
    boolean arrived = false;
    try {
      FrameCodec.Reply reply = c.fetchFiles(new FrameCodec.FetchFiles(file.storeId(), partition, file.name(),
          file.version(), fetchTimeoutMs));
      arrived = reply.status() == FrameCodec.STATUS_ACCEPTED && reply.message().startsWith("fetched ");
      LOG.info("statestore-fs: {} has no local copy of {}; its state node {}", file.storeId(), file.name(),
          arrived ? reply.message() : "fetched nothing from a peer: " + reply.message());
    } catch (IOException | RuntimeException e) {
      LOG.info("statestore-fs: {} has no local copy of {}, and its state node did not fetch the partition's files "
          + "from a peer ({}); read from the checkpoint location", file.storeId(), file.name(), e.toString());
    } finally {
      mine.complete(arrived);
    }
    return arrived;
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
        fetchTimeoutMs = settings.materializeTimeoutMs;
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
