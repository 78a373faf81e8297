package io.statestore.spark;

import java.io.File;
import java.io.IOException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.execution.streaming.state.StateStoreConf;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.rocksdb.RocksDBException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The provider of one store partition, whatever the Spark line: keeps the partition's primary data in a local
 * RocksDB, writes every commit's increment durably to the checkpoint location, snapshots in the background,
 * restores exactly any retained version and hands the partition to and from its state node. Each line's
 * {@code StatestoreProvider} (spark_provider/java_lines/README.md) extends it with that line's Spark contract, and
 * its {@code StatestoreStore} wraps the {@link StoreSession} a load hands out. It uses only Spark classes every
 * supported line has alike (UnsafeRow, StateStoreId, StateStoreConf, TaskContext, SparkEnv).
 */
public abstract class ProviderCore {
  private static final Logger LOG = LoggerFactory.getLogger(ProviderCore.class);
  /** Longest a background snapshot waits for a quiet point between batches before the next commit retries. */
  private static final long QUIET_POINT_WAIT_NANOS = TimeUnit.MINUTES.toNanos(5);
  private static final ExecutorService SNAPSHOTS = Executors.newSingleThreadExecutor(r -> {
    Thread t = new Thread(r, "statestore-snapshot");
    t.setDaemon(true);
    return t;
  });

  /** Figures of the last commit, for metrics: the commit time and its parts. */
  record LastCommit(long incrementBytes, long incrementRecords, long commitMs, long prepareMs, long encodeMs,
      long writeMs) {}

  /** Figures of the last background snapshot, for metrics. */
  record LastSnapshot(long version, long flushMs, long checkpointMs, long uploadMs) {}

  private StateStoreId storeId;
  private String storeIdString;
  private ProviderSettings settings;
  private Configuration hadoopConf;
  private CheckpointDir checkpoint;
  private LocalChannel channel;
  /**
   * Per partition (checkpoint location and store id), the provider of this JVM that last loaded it for writing
   * or handed the node a commit of it. Spark keeps one provider per query run, so after a restart the old run's
   * provider may close while the new run's owns the same partition here: only the last owner releases it.
   */
  private static final java.util.concurrent.ConcurrentHashMap<String, ProviderCore> LAST_OWNER =
      new java.util.concurrent.ConcurrentHashMap<>();
  private StateLoader loader;
  /** The load that brought the state to the version loaded last (a read store's load, for the write store of the
   * same version that follows it in one task): what metrics and the node are told. */
  private volatile StateLoader.Loaded lastLoad;
  private long lastLoadVersion = -1;
  private boolean abortedSinceLoad;
  /** Spark asked for a snapshot at the coming commit (its coordinator saw this store's uploads lag). */
  private boolean snapshotAtCommit;
  private org.apache.spark.sql.execution.streaming.state.StateStoreCoordinatorRef coordinator;
  /** The last load from elsewhere than this provider's own directory (its first load if none), and its version:
   * what the node reports as the partition's last load. */
  private StateLoader.Loaded notableLoad;
  private long notableLoadVersion;
  /** The local channel's connection count when this provider last told its node it is the partition's
   * primary (-1: never). */
  private long promotedOn = -1;
  /** The query run this provider serves (Spark sets it in the Hadoop conf it passes to init). */
  private String runId = "";
  private NodeSidecar.Spec sidecarSpec;
  private File localDir;
  private volatile LocalStore local;
  private boolean localDirty;
  private StoreSession current;
  private SnapshotSchedule snapshotSchedule;
  /** The snapshot slot of the last snapshot taken or of the version loaded (SnapshotSchedule). */
  private volatile long lastSnapshotVersion;
  /** Closing the local store waits for a background flush (which runs without the provider's monitor). */
  private final ReentrantReadWriteLock localLife = new ReentrantReadWriteLock();
  private long staleAbove = Long.MAX_VALUE;
  /** A store able to write is open (between getStore and its commit or abort); guarded by the monitor. */
  private boolean writerOpen;
  /** Spark closed this provider while a task still used its store: close once it commits or aborts. */
  private boolean closeDeferred;
  /** Tasks that got a store of this provider and have not ended yet; guarded by the monitor. */
  private int tasksUsing;
  /** The attempt ids of those tasks; guarded by the monitor. */
  private final java.util.Set<Long> tasksUsingIds = new java.util.HashSet<>();
  private static final java.util.concurrent.ExecutorService DEFERRED_CLOSER =
      java.util.concurrent.Executors.newSingleThreadExecutor(r -> {
        Thread t = new Thread(r, "statestore-deferred-close");
        t.setDaemon(true);
        return t;
      });
  private boolean closing;
  /** When the batch being written loaded its store (System.nanoTime): a commit reports the batch's cost from it. */
  private long batchStartNanos;
  /** Set at the end of close (guarded by the monitor; waiters are notified). */
  private boolean closed;
  private volatile Future<?> pendingSnapshot;
  private volatile LastCommit lastCommit = new LastCommit(0, 0, 0, 0, 0, 0);
  private volatile LastSnapshot lastSnapshot = new LastSnapshot(0, 0, 0, 0);

  // The Spark contract's methods are the lines' StatestoreProvider's (java_spark4/, java_lines/3.5/): they call
  // the methods below.

  /** Spark's init, what every line passes: the store's id, its settings and the Hadoop conf of its query. */
  protected final void initCore(StateStoreId id, StateStoreConf storeConf, Configuration hadoopConf) {
    this.storeId = id;
    this.storeIdString = id.operatorId() + "/" + id.partitionId() + "/" + id.storeName();
    this.settings = ProviderSettings.from(storeConf);
    this.snapshotSchedule = new SnapshotSchedule(id.partitionId(), settings.minDeltasForSnapshot);
    this.hadoopConf = hadoopConf;
    this.runId = SparkLine.runId(hadoopConf);
    try {
      this.checkpoint = new CheckpointDir(id.storeCheckpointLocation(), hadoopConf);
      File jvmDir = LocalDirs.jvmDir(settings.localDir);
      this.localDir = new File(jvmDir, id.operatorId() + "_" + id.partitionId() + "_" + id.storeName() + "_"
          + java.util.UUID.randomUUID());
      this.channel = servesStreamingQuery(runId) ? LocalChannel.of(settings) : null;
      this.loader = new StateLoader(storeIdString, id.partitionId(), checkpoint, settings, channel);
    } catch (IOException e) {
      throw new IllegalStateException("statestore: cannot initialise " + storeIdString + ": " + e.getMessage(), e);
    }
    if (channel != null) this.sidecarSpec = LocalChannel.sidecarSpec(settings);
  }

  /**
   * Whether this provider serves a streaming query's tasks, not a batch job's such as the state data source's
   * (spark.read.format("statestore")): those read the checkpoint location only, never tell the state node that
   * this executor runs the partition, and so never disturb the replicas of the query that wrote it. Spark marks a
   * streaming query's jobs with the local property sql.streaming.queryId, and its stateful operators' Hadoop conf
   * with the run id ({@code runId}): a micro-batch that Spark Connect's foreachBatch runs from its own execution
   * thread has only the latter. Outside a task (tests) it serves one.
   */
  private static boolean servesStreamingQuery(String runId) {
    org.apache.spark.TaskContext task = org.apache.spark.TaskContext.get();
    return task == null || task.getLocalProperty("sql.streaming.queryId") != null || !runId.isEmpty();
  }

  public StateStoreId stateStoreId() {
    return storeId;
  }

  String storeIdString() {
    return storeIdString;
  }

  /** The partition's checkpoint directory (the change feed reads its increments). */
  protected final CheckpointDir checkpoint() {
    return checkpoint;
  }

  LastCommit lastCommit() {
    return lastCommit;
  }

  LastSnapshot lastSnapshot() {
    return lastSnapshot;
  }

  /** The load that brought this provider's state to the version last handed out (null before any). */
  StateLoader.Loaded lastLoad() {
    return lastLoad;
  }

  /**
   * Version {@code version} for a task of the query: loaded from wherever it is cheapest and trusted (formats.md
   * 5), the store handed out able to write. {@code uniqueId}: Spark's checkpoint id of the version (v2), when it
   * has one; {@code snapshotAtCommit}: Spark's coordinator asks for a snapshot at this commit.
   */
  protected final synchronized StoreSession loadForTask(long version, scala.Option<String> uniqueId,
      boolean snapshotAtCommit) {
    if (version < 0) throw new IllegalArgumentException("Version cannot be less than 0: " + version);
    this.snapshotAtCommit = snapshotAtCommit;
    settleCurrent();
    if (local == null && channel != null) {
      takeOverFromPrevious();
      distrustUnappliedWrites(); // a store taken over whose last commit's writes failed in the background
    }
    byte[] wanted = CheckpointIds.lineageOf(uniqueId, storeIdString, version);
    return handOut(version, true, () -> loader.load(local, !localDirty, localDir, version, wanted, this::closeLocal));
  }

  /**
   * Spark's state data source with {@code snapshotStartBatchId}: version {@code endVersion} replayed from snapshot
   * {@code snapshotVersion} of the checkpoint location and the increments above it, never from this executor's
   * directory or a state node. The store is not the partition's primary for the node.
   */
  protected final synchronized StoreSession replayFromSnapshot(long snapshotVersion, long endVersion,
      scala.Option<String> endUniqueId) {
    if (snapshotVersion < 1 || endVersion < snapshotVersion) {
      throw new IllegalArgumentException("statestore: cannot replay store " + storeIdString + " from snapshot version "
          + snapshotVersion + " to version " + endVersion + ": the snapshot version must be at least 1 and at most "
          + "the end version (snapshotStartBatchId <= batchId)");
    }
    snapshotAtCommit = false;
    settleCurrent();
    byte[] wanted = CheckpointIds.lineageOf(endUniqueId, storeIdString, endVersion);
    return handOut(endVersion, false, () -> {
      closeLocal();
      LocalDirs.deleteRecursively(localDir);
      return loader.replayFromSnapshot(localDir, snapshotVersion, endVersion, wanted);
    });
  }

  /** Before another load: the store handed out last stops scanning and, if its last increment was still being
   * applied in the background, finishes it (or is distrusted). */
  private void settleCurrent() {
    if (current != null) {
      current.closeScans();
      // A store handed out with its last increment pending (a read store, then this write store in one task):
      // the load below needs the store whole.
      if (!current.settlePartial()) localDirty = true;
    }
    distrustUnappliedWrites();
  }

  /** The local store is not trusted when its last commit's writes, applied in the background, did not land. */
  private void distrustUnappliedWrites() {
    if (local != null && !localDirty && !local.writesApplied()) {
      localDirty = true; // LocalStore logged why
      LOG.info("statestore: the local directory of {} lacks its last commit's writes; the next load replaces it",
          storeIdString);
    }
  }

  /** A load that may fail. */
  private interface Load {
    StateLoader.Loaded run() throws IOException, RocksDBException;
  }

  /**
   * Runs {@code load} for {@code version} and hands out the store it brought; {@code primary}: the task runs the
   * partition (the node is told it is its primary here), not a replay for the state data source.
   */
  private StoreSession handOut(long version, boolean primary, Load load) {
    StateLoader.Loaded loaded;
    try {
      loaded = load.run();
    } catch (IOException | RocksDBException e) {
      closeLocal();
      throw new IllegalStateException("statestore: cannot load version " + version + " of store " + storeIdString
          + " from " + checkpoint.dir + ": " + e.getMessage(), e);
    }
    if (local != loaded.store()) {
      local = loaded.store();
      localDir = local.dir; // a copy opened ahead of a move lives in a directory of its own
      lastSnapshotVersion = snapshotSchedule.slotAtOrBelow(loaded.fromVersion());
    }
    localDirty = false;
    staleAbove = loaded.latestInCheckpoint() > version ? version : Long.MAX_VALUE;
    // A read store's load then the write store's of the same version (one task): the first one tells where the
    // state came from. After an abort the next load is another attempt's, and reported as it is.
    boolean sameVersionAgain = lastLoadVersion == version && loaded.source() == StateLoader.Source.LOCAL
        && loaded.versionsApplied() == 0 && lastLoad != null && !abortedSinceLoad;
    abortedSinceLoad = false;
    if (!sameVersionAgain) {
      lastLoad = loaded;
      lastLoadVersion = version;
      logLoad(loaded, version);
      if (loaded.source() != StateLoader.Source.LOCAL || notableLoad == null) {
        notableLoad = loaded;
        notableLoadVersion = version;
      }
    }
    // Every store is writable: Spark wraps it for reading (getReadStore) and asks again to write.
    PendingIncrement pending = loaded.pending();
    current = new StoreSession(this, local, version, pending == null ? null : new PartialMerge(pending, local));
    Faults.at(settings.faultsFile, "load", storeId.partitionId(), storeIdString);
    writerOpen = true;
    batchStartNanos = System.nanoTime();
    org.apache.spark.TaskContext task = org.apache.spark.TaskContext.get();
    if (task != null) {
      // Spark reads the store's metrics after its commit, in the same task: a close Spark asks for meanwhile
      // waits for the task's end, not only for the commit.
      tasksUsing++;
      tasksUsingIds.add(task.taskAttemptId());
      CommitWriter.taskUsing();
      task.addTaskCompletionListener(new org.apache.spark.util.TaskCompletionListener() {
        @Override
        public void onTaskCompletion(org.apache.spark.TaskContext context) {
          CommitWriter.taskDone();
          taskEnded(context.taskAttemptId());
        }
      });
    }
    if (pending == null) {
      try {
        local.beginBatch(); // else once the increment is applied (PartialMerge)
      } catch (RuntimeException e) {
        // No store was handed out: the task fails, and a close Spark asks for must not wait for a writer forever.
        writerOpen = false;
        localDirty = true;
        notifyAll();
        throw e;
      }
    }
    if (channel != null && primary) {
      LAST_OWNER.put(partitionKey(), this);
      // Spark runs the partition's task here now: the node becomes its primary (no news when it already is,
      // unless the node may have restarted since: it then forgot). With the last increment pending, the lineage
      // of the version is not known yet.
      if (lastLoad.source() != StateLoader.Source.LOCAL || promotedOn != channel.connections()) {
        channel.promoted(storeIdString, checkpoint.dir.toString(), version, pending == null ? local.lineage() : null,
            notableLoad, notableLoadVersion, sparkPlace(), sidecarSpec);
        promotedOn = channel.connections();
      }
    }
    return current;
  }

  /**
   * A provider Spark unloaded stays open until its executor's maintenance closes it (60 s by default), and Spark
   * may load the same partition again here meanwhile in a new provider: a task of the batch that was in flight
   * when the driver moved the partition away (a hand-over), or a move back. That provider's directory is this
   * one's own directory in all but name, so the new provider takes its store over when it is idle and clean
   * (no open writer, no snapshot under way) and of the same query run, instead of asking the node, whose copy it
   * is, or the checkpoint location. A store still in use (the previous batch's task committing or ending, a
   * snapshot under way) is waited for, up to {@code materializeTimeoutMs}. Call with the monitor.
   */
  private void takeOverFromPrevious() {
    ProviderCore previous = LAST_OWNER.get(partitionKey());
    // The same query run only: a restarted query loads as a new run does (its own checks of the checkpoint).
    if (previous == null || previous == this || !previous.runId.equals(runId)) return;
    long deadline = System.nanoTime() + settings.materializeTimeoutMs * 1_000_000L;
    Yielded yielded = previous.yieldLocalOnceIdle(this, deadline);
    if (yielded == null) {
      // Not taken over: the node is to be asked, and until the previous provider's close has told it (DEMOTE or
      // RELEASED, which the node's answer then waits for), it is still the partition's primary and has no copy to
      // give (seen in a join's hand-over: a checkpoint load 4 ms before the close's DEMOTE arrived).
      previous.awaitClosed(currentTaskAttempt(), deadline);
      return;
    }
    local = yielded.store();
    localDir = yielded.dir();
    localDirty = false;
    LOG.info("statestore: {} takes over the idle store (version {}) of this executor's previous provider of the "
        + "partition, which Spark unloaded", storeIdString, local.version());
  }

  /**
   * Waits until this provider is closed (Spark unloaded it: a newer provider of the partition exists, so its close
   * is under way, or deferred until the task using it ends), at most until {@code deadlineNanos}; at once when
   * {@code askingTask} itself uses this provider's store (the close waits for that task: waiting would wait for
   * itself).
   */
  private synchronized void awaitClosed(long askingTask, long deadlineNanos) {
    while (!closed && !(askingTask >= 0 && tasksUsingIds.contains(askingTask))) {
      if (!waitOnMonitor(deadlineNanos)) {
        LOG.info("statestore: {} asks the state node before the previous provider of the partition closed",
            storeIdString);
        return;
      }
    }
  }

  /** An idle, clean local store and its directory, given away to a newer provider of the same partition. */
  private record Yielded(LocalStore store, File dir) {}

  /**
   * Gives this provider's store to {@code successor} once it is idle: the task of the previous batch may still be
   * committing or ending, or a snapshot be under way, when the next batch's task loads the partition in a new
   * provider (Spark unloaded this one meanwhile), and waiting for that is far cheaper than a load from elsewhere.
   * The task asking may hold this provider's store itself (its read store; Spark unloaded the provider in
   * between): then it is given at once if no other task uses it and it has no uncommitted writes. Returns null
   * when the store is not there or not clean, and at {@code deadlineNanos}. A close under way is waited for, then null:
   * the node has the directory by then (DEMOTE), and the successor asks it.
   */
  private Yielded yieldLocalOnceIdle(ProviderCore successor, long deadlineNanos) {
    long askingTask = currentTaskAttempt();
    while (true) {
      Future<?> snapshot;
      synchronized (this) {
        LocalStore store = local;
        if (closing) {
          if (!closed && waitOnMonitor(deadlineNanos)) continue;
          return null;
        }
        if (store == null || localDirty || store.lineage() == null) return null;
        snapshot = pendingSnapshot;
        boolean busy = writerOpen || tasksUsing > 0;
        if (askingTask >= 0 && tasksUsingIds.contains(askingTask)) {
          // The asking task itself holds this provider's store: its read store, and Spark unloaded the provider
          // before the task asked for its write store, which lands in a new provider. Waiting would wait for
          // itself; the store is the task's own and clean, so it goes on in the new provider (the read store
          // then reads the same database).
          if (tasksUsingIds.size() > 1) return null;
          // Its read store may have the last increment still applied in the background (a partial load): the
          // successor loads from the store as it finds it, so the increment must have landed (or the store is
          // in doubt and not given).
          if (current != null && !current.settlePartial()) return null;
          if (store.hasUncommittedChanges()) return null;
          busy = false;
        }
        if (!busy && store.hasUncommittedChanges()) return null;
        if (!busy && (snapshot == null || snapshot.isDone())) {
          Yielded yielded = new Yielded(store, localDir);
          local = null; // this provider's close then neither closes nor deletes it, nor tells the node
          localDir = null;
          current = null;
          LAST_OWNER.replace(partitionKey(), this, successor);
          return yielded;
        }
        if (busy) {
          if (waitOnMonitor(deadlineNanos)) continue;
          LOG.info("statestore: {} not taken over from the previous provider: its task did not end in time",
              storeIdString);
          return null;
        }
      }
      // The background snapshot needs the monitor: wait for it without holding it.
      try {
        snapshot.get(Math.max(1, deadlineNanos - System.nanoTime()), TimeUnit.NANOSECONDS);
      } catch (java.util.concurrent.TimeoutException e) {
        LOG.info("statestore: {} not taken over from the previous provider: its snapshot did not end in time",
            storeIdString);
        return null;
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return null;
      } catch (java.util.concurrent.ExecutionException e) {
        // the snapshot's own failure is logged by it; the store is as it was
      }
    }
  }

  /** Waits on the monitor (held) until notified or {@code deadlineNanos}; false once the deadline passed. */
  private boolean waitOnMonitor(long deadlineNanos) {
    long left = deadlineNanos - System.nanoTime();
    if (left <= 0) return false;
    try {
      wait(Math.max(1, left / 1_000_000));
      return true;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    }
  }

  /** The attempt id of the Spark task this thread runs, or -1 outside a task. */
  private static long currentTaskAttempt() {
    org.apache.spark.TaskContext task = org.apache.spark.TaskContext.get();
    return task == null ? -1 : task.taskAttemptId();
  }

  /** The task slots of this executor (spark.executor.cores; 1 when not set, as Spark's default). */
  private static int executorCores() {
    org.apache.spark.SparkEnv env = org.apache.spark.SparkEnv.get();
    return env == null ? 1 : env.conf().getInt("spark.executor.cores", 1);
  }

  /** Who runs this partition's task now, in Spark's terms (the driver steers the next task with it). */
  private ChannelFrames.SparkPlace sparkPlace() {
    org.apache.spark.SparkEnv env = org.apache.spark.SparkEnv.get();
    String executorId = env == null ? "driver" : env.executorId();
    return new ChannelFrames.SparkPlace(runId, storeId.checkpointRootLocation(), executorId,
        LocalChannel.executorHost());
  }

  private void logLoad(StateLoader.Loaded l, long version) {
    String passed = l.passedOver().isEmpty() ? "" : " (passed over: " + l.passedOver() + ")";
    if (l.source() == StateLoader.Source.LOCAL && l.versionsApplied() == 0 && passed.isEmpty()) {
      LOG.debug("statestore: loaded {} version {} from its local directory", storeIdString, version);
      return;
    }
    String ahead = l.openedAhead() ? " (opened ahead of the move)" : "";
    String partial = l.pending() == null ? "" : " (partial: the last increment is applied in the background, the "
        + "batch's writes go to an overlay meanwhile)";
    LOG.info("statestore: loaded {} version {} from {} (at version {}, {} increments applied) in {} ms{}{}{}",
        storeIdString, version, l.source().label(), l.fromVersion(), l.versionsApplied(), l.millis(), ahead, partial,
        passed);
  }

  /**
   * Commit step of a store: local meta, then the increment, durable, then the coordinator. A snapshot due
   * at this version is only scheduled here: {@link #snapshot} makes it in the background.
   */
  long commit(LocalStore store) {
    // A sync commit's wait for a replica's ack happens after the commit, outside this provider's monitor: the
    // close, a successor's take-over and the background snapshot need it meanwhile.
    Committed committed = commitLocked(store);
    store.startWrites(); // the batch's writes into RocksDB, off the commit's path, at the JVM's next quiet point
    if (committed.synced() != null) {
      LocalChannel.awaitSync(committed.synced(), storeIdString, committed.version());
      committed.report().run(); // the LOAD report follows its version's COMMITTED, as the node expects
      Faults.at(settings.faultsFile, "acked", storeId.partitionId(), storeIdString);
    }
    return committed.version();
  }

  /** A version committed, and the node's answer to wait for when replication is sync (else null). */
  private record Committed(long version, CompletableFuture<FrameCodec.Reply> synced, Runnable report) {}

  /** The commit under the monitor. */
  private synchronized Committed commitLocked(LocalStore store) {
    Faults.at(settings.faultsFile, "commit", storeId.partitionId(), storeIdString);
    long start = System.nanoTime();
    CompletableFuture<FrameCodec.Reply> synced = null;
    Runnable report = () -> {};
    try {
      Increment inc = store.prepareCommit();
      // Loaded older than what the checkpoint location held: this commit rewrites history (formats.md 5, 6).
      boolean rewritesHistory = staleAbove != Long.MAX_VALUE;
      if (rewritesHistory) {
        checkpoint.supersedeFrom(inc.version);
        staleAbove = Long.MAX_VALUE;
      }
      long prepared = System.nanoTime();
      byte[] bytes = IncrementCodec.encode(inc, settings.zstdLevel);
      store.finishCommit(inc);
      long encoded = System.nanoTime();
      checkpoint.writeIncrement(inc.version, bytes);
      long written = System.nanoTime();
      if (snapshotAtCommit || snapshotSchedule.due(inc.version, lastSnapshotVersion)) {
        scheduleSnapshot(store, inc.version);
      }
      snapshotAtCommit = false;
      if (settings.commitValidation) SparkLine.reportCommit(inc.version, storeId, hadoopConf);
      if (channel != null) {
        LAST_OWNER.put(partitionKey(), this);
        CompletableFuture<FrameCodec.Reply> answer = channel.committed(storeIdString, checkpoint.dir.toString(),
            inc.version, rewritesHistory, bytes, settings.syncReplication, sidecarSpec);
        long taskMillis = (System.nanoTime() - batchStartNanos) / 1_000_000;
        long rows = inc.records();
        long stateBytes = store.sstBytes();
        LocalChannel to = channel;
        report = () -> to.load(storeIdString, checkpoint.dir.toString(), inc.version, taskMillis, rows, stateBytes,
            executorCores(), sidecarSpec);
        if (settings.syncReplication) {
          synced = answer; // a sync COMMITTED is answered on its own connection: the report waits for the answer
        } else {
          report.run();
        }
      }
      Faults.at(settings.faultsFile, "committed", storeId.partitionId(), storeIdString);
      long end = System.nanoTime();
      lastCommit = new LastCommit(bytes.length, inc.records(), (end - start) / 1_000_000, (prepared - start) / 1_000_000,
          (encoded - prepared) / 1_000_000, (written - encoded) / 1_000_000);
      if (LOG.isDebugEnabled()) {
        LOG.debug("statestore: commit of {} version {}: {} ms (prepare {} ms, encode {} ms, write {} ms, "
            + "rest {} ms), {} records, {} bytes", storeIdString, inc.version, lastCommit.commitMs(),
            lastCommit.prepareMs(), lastCommit.encodeMs(), lastCommit.writeMs(), (end - written) / 1_000_000,
            inc.records(), bytes.length);
      }
      return new Committed(inc.version, synced, report);
    } catch (IOException | RocksDBException | RuntimeException e) {
      localDirty = true;
      throw new IllegalStateException("statestore: commit of store " + storeIdString + " failed: " + e.getMessage(), e);
    } finally {
      writerOpen = false;
      notifyAll(); // a background snapshot may be waiting for this quiet point
      closeIfDeferred();
    }
  }

  /** Hands the snapshot of {@code version} to the background thread, unless one is still under way. */
  private void scheduleSnapshot(LocalStore store, long version) {
    Future<?> pending = pendingSnapshot;
    if (pending != null && !pending.isDone()) return; // a later commit schedules it again
    pendingSnapshot = SNAPSHOTS.submit(() -> snapshot(store, version));
  }

  /**
   * Snapshot of committed {@code version}, off the commit path, in three steps:
   * <ol>
   *   <li>flush the memtables without the provider's monitor (RocksDB allows it while the next batch
   *       writes; the local store cannot be closed meanwhile);</li>
   *   <li>under the monitor, at the next quiet point (no store able to write: commit and abort notify, and
   *       a new writable store needs the monitor), a RocksDB checkpoint of the version committed then, which
   *       may be later than {@code version}: hard links, little left to flush. Waiting for the quiet point,
   *       rather than skipping when a batch is under way, is what lets snapshots happen at all when batches
   *       follow each other with gaps shorter than a flush;</li>
   *   <li>upload and retention, without the monitor.</li>
   * </ol>
   */
  private void snapshot(LocalStore store, long version) {
    long start = System.nanoTime();
    localLife.readLock().lock();
    try {
      if (local != store) return;
      store.flushForSnapshot();
    } catch (RocksDBException | RuntimeException e) {
      LOG.warn("statestore: flush for snapshot {} of {} failed: {}", version, storeIdString, e.toString());
      return;
    } finally {
      localLife.readLock().unlock();
    }
    long flushed = System.nanoTime();
    File staging;
    byte[] lineage;
    synchronized (this) {
      long deadline = flushed + QUIET_POINT_WAIT_NANOS;
      while (local == store && !localDirty && !closing && (writerOpen || store.hasUncommittedChanges())) {
        long left = deadline - System.nanoTime();
        if (left <= 0) {
          LOG.debug("statestore: snapshot {} of {} skipped, no quiet point in time", version, storeIdString);
          return;
        }
        try {
          wait(Math.max(1, left / 1_000_000));
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          return;
        }
      }
      if (local != store || localDirty || writerOpen || store.hasUncommittedChanges()) return;
      version = store.version();
      lineage = store.lineage();
      staging = new File(localDir.getPath() + ".snapshot-" + version);
      try {
        LocalDirs.deleteRecursively(staging);
        store.checkpointTo(staging);
      } catch (RocksDBException | RuntimeException e) {
        LOG.warn("statestore: local checkpoint {} of {} failed: {}", version, storeIdString, e.toString());
        LocalDirs.deleteRecursively(staging);
        return;
      }
      lastSnapshotVersion = Math.max(lastSnapshotVersion, snapshotSchedule.slotAtOrBelow(version));
    }
    long checkpointed = System.nanoTime();
    try {
      checkpoint.uploadSnapshot(version, storeIdString, staging, lineage);
      if (checkpoint.deleteSnapshotIfAbandoned(version, storeIdString, lineage)) {
        LOG.info("statestore: snapshot {} of {} deleted after its upload: a re-run batch rewrote that version "
            + "meanwhile", version, storeIdString);
        return;
      }
      reportSnapshotUploaded(version);
      checkpoint.retain(settings.minVersionsToRetain, storeIdString);
    } catch (IOException | RuntimeException e) {
      LOG.warn("statestore: snapshot {} of {} not uploaded: {}", version, storeIdString, e.toString());
    } finally {
      LocalDirs.deleteRecursively(staging);
    }
    long end = System.nanoTime();
    lastSnapshot = new LastSnapshot(version, (flushed - start) / 1_000_000, (checkpointed - flushed) / 1_000_000,
        (end - checkpointed) / 1_000_000);
    LOG.debug("statestore: snapshot {} of {}: {}", version, storeIdString, lastSnapshot);
  }

  /**
   * Tells Spark's StateStoreCoordinator that a snapshot of {@code version} was uploaded, as Spark's own providers
   * do: without it the coordinator counts this store's snapshots as lagging and logs it. Best effort.
   */
  private void reportSnapshotUploaded(long version) {
    if (runId.isEmpty()) return;
    try {
      org.apache.spark.SparkEnv env = org.apache.spark.SparkEnv.get();
      if (env == null) return;
      if (coordinator == null) {
        coordinator = org.apache.spark.sql.execution.streaming.state.StateStoreCoordinatorRef.forExecutor(env);
      }
      SparkLine.snapshotUploaded(coordinator, new org.apache.spark.sql.execution.streaming.state.StateStoreProviderId(
          storeId, java.util.UUID.fromString(runId)), version, System.currentTimeMillis());
    } catch (RuntimeException e) {
      LOG.debug("statestore: snapshot {} of {} not reported to the coordinator: {}", version, storeIdString,
          e.toString());
    }
  }

  /** A partial-state merge of {@code store} failed: its directory is not trusted any more. */
  synchronized void distrust(LocalStore store) {
    if (store == local) localDirty = true;
  }

  synchronized void abort(LocalStore store) {
    abortedSinceLoad = true;
    try {
      if (store == local && !store.rollback()) {
        localDirty = true;
        LOG.info("statestore: abort of {} version {}: the batch dropped a column family, so its writes cannot be "
            + "undone; the next load replaces the local directory", storeIdString, store.version());
      }
    } catch (RocksDBException | RuntimeException e) {
      localDirty = true;
      LOG.warn("statestore: abort of {} could not undo the batch's writes ({}); the next load replaces the local "
          + "directory", storeIdString, e.toString());
    } finally {
      writerOpen = false;
      notifyAll();
      closeIfDeferred();
    }
  }

  /** The close Spark asked for while the store was in use, now that it is not (call with the monitor; the close
   * itself runs on another thread: it waits for a background snapshot, which needs the monitor). */
  private synchronized void taskEnded(long taskAttemptId) {
    tasksUsing--;
    tasksUsingIds.remove(taskAttemptId);
    notifyAll(); // a successor may wait for this provider's store to be idle
    closeIfDeferred();
  }

  private void closeIfDeferred() {
    if (!closeDeferred || writerOpen || tasksUsing > 0) return;
    closeDeferred = false;
    DEFERRED_CLOSER.execute(this::close);
  }

  public void doMaintenance() {
    try {
      checkpoint.retain(settings.minVersionsToRetain, storeIdString);
    } catch (IOException e) {
      LOG.warn("statestore: retention of {} failed: {}", storeIdString, e.toString());
    }
  }

  private void closeLocal() {
    if (current != null) {
      current.closeScans();
      current.awaitPartial(); // the background thread must be done with the store before it closes
    }
    if (local != null) {
      localLife.writeLock().lock();
      try {
        local.close();
        local = null;
      } finally {
        localLife.writeLock().unlock();
      }
    }
  }

  public void close() {
    synchronized (this) {
      if (writerOpen || tasksUsing > 0) {
        // Spark unloads a provider its coordinator places on another executor, and in Spark 4 it may do so
        // while a task of this executor still uses the store (from that task's own thread, or the maintenance
        // thread): a task that loaded the partition before the driver moved it (a planned hand-over steers the
        // next batch while one runs), or a stream-stream join's task whose later store loads report its earlier
        // stores inactive. Closing under that task would crash it (Spark reads the store's metrics after its
        // commit), so the close happens once the task ends (as Spark's RocksDB provider waits for the task
        // holding its instance).
        closeDeferred = true;
        LOG.info("statestore: close of {} deferred until the task using its store version {} ends",
            storeIdString, current == null ? -1 : current.version());
        return;
      }
      closing = true; // a snapshot waiting for a quiet point gives up
      notifyAll();
    }
    // Not under the monitor: the background snapshot takes it.
    Future<?> pending = pendingSnapshot;
    if (pending != null) {
      try {
        pending.get(60, TimeUnit.SECONDS);
      } catch (Exception e) {
        LOG.warn("statestore: pending snapshot of {} did not finish: {}", storeIdString, e.toString());
      }
    }
    synchronized (this) {
      if (writerOpen || tasksUsing > 0) {
        // A task loaded the store while this close waited for the snapshot (the maintenance thread unloaded the
        // provider as that task took it): closing now would close RocksDB under it. Closed once the task ends.
        closing = false;
        closeDeferred = true;
        LOG.info("statestore: close of {} deferred: a task loaded its store version {} during the close",
            storeIdString, current == null ? -1 : current.version());
        return;
      }
      // After the commits already queued, the node stops claiming the partition (formats.md section 6), unless
      // another provider of this JVM (a later query run) took it since. A clean local directory is handed to
      // the node to keep as a replica (DEMOTE): the query's next run, or a move back, finds it warm.
      // This provider stays the partition's last owner until its notice is queued: a successor that finds no
      // previous provider asks the node at once, and its MATERIALIZE must not overtake the DEMOTE (seen in a join's
      // hand-over: the successor asked while this close flushed, 19 ms before the DEMOTE reached the node).
      boolean owner = channel != null && LAST_OWNER.get(partitionKey()) == this;
      LocalStore store = local;
      boolean handOver = owner && store != null && !localDirty && !writerOpen && !store.hasUncommittedChanges()
          && store.lineage() != null;
      long version = handOver ? store.version() : 0;
      byte[] lineage = handOver ? store.lineage() : null;
      if (handOver) {
        try {
          store.flush(); // the WAL is off: what the memtables hold must be in SST files before the node opens it
        } catch (RocksDBException | RuntimeException e) {
          LOG.info("statestore: {} not handed to the state node, flush failed: {}", storeIdString, e.toString());
          handOver = false;
        }
      }
      closeLocal();
      if (handOver) {
        channel.demoted(storeIdString, checkpoint.dir.toString(), version, lineage, localDir, sidecarSpec);
      } else {
        if (localDir != null) LocalDirs.deleteRecursively(localDir);
        if (owner) channel.released(storeIdString, checkpoint.dir.toString(), sidecarSpec);
      }
      if (owner) LAST_OWNER.remove(partitionKey(), this);
      closed = true;
      notifyAll(); // a successor waiting for this provider's store asks the node now
    }
  }

  private String partitionKey() {
    return checkpoint.dir + "\u0000" + storeIdString;
  }

  @Override
  public String toString() {
    return "StatestoreProvider[" + storeIdString + "]";
  }
}
