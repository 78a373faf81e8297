package io.statestore.spark;

import java.io.File;
import java.io.IOException;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.execution.streaming.state.KeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.StateSchemaProvider;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreConf;
import org.apache.spark.sql.execution.streaming.state.StateStoreCustomMetric;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreProvider;
import org.apache.spark.sql.types.StructType;
import org.rocksdb.RocksDBException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Spark's entry point: one instance per store partition. Keeps the partition's primary data in a local
 * RocksDB, writes every commit's increment durably to the checkpoint location, snapshots in the background
 * and restores exactly any retained version.
 */
public final class StatestoreProvider implements StateStoreProvider {
  private static final Logger LOG = LoggerFactory.getLogger(StatestoreProvider.class);
  private static final ExecutorService UPLOADS = Executors.newSingleThreadExecutor(r -> {
    Thread t = new Thread(r, "statestore-snapshot-upload");
    t.setDaemon(true);
    return t;
  });

  /** Figures of the last commit, for metrics. */
  record LastCommit(long incrementBytes, long incrementRecords, long commitMs) {}

  private ReentrantReadWriteLock maintenanceLock;
  private boolean unloaded;

  private StateStoreId storeId;
  private String storeIdString;
  private ProviderSettings settings;
  private Configuration hadoopConf;
  private CheckpointDir checkpoint;
  private File localDir;
  private final Map<String, RowCodec> codecs = new ConcurrentHashMap<>();
  private LocalStore local;
  private boolean localDirty;
  private StatestoreStore current;
  private long lastSnapshotVersion;
  private long staleAbove = Long.MAX_VALUE;
  private Future<?> pendingUpload;
  private volatile LastCommit lastCommit = new LastCommit(0, 0, 0);
  private volatile long lastLoadMs;

  public StatestoreProvider() {
    StateStoreProvider.$init$(this);
  }

  @Override
  public void org$apache$spark$sql$execution$streaming$state$StateStoreProvider$_setter_$maintenanceLock_$eq(
      ReentrantReadWriteLock lock) {
    this.maintenanceLock = lock;
  }

  @Override
  public ReentrantReadWriteLock maintenanceLock() {
    return maintenanceLock;
  }

  @Override
  public boolean unloaded() {
    return unloaded;
  }

  @Override
  public void unloaded_$eq(boolean value) {
    unloaded = value;
  }

  @Override
  public void init(StateStoreId id, StructType keySchema, StructType valueSchema, KeyStateEncoderSpec spec,
      boolean useColumnFamilies, StateStoreConf storeConf, Configuration hadoopConf, boolean multipleValuesPerKey,
      scala.Option<StateSchemaProvider> schemaProvider) {
    this.storeId = id;
    this.storeIdString = id.operatorId() + "/" + id.partitionId() + "/" + id.storeName();
    this.settings = ProviderSettings.from(storeConf);
    this.hadoopConf = hadoopConf;
    try {
      this.checkpoint = new CheckpointDir(id.storeCheckpointLocation(), hadoopConf);
      File jvmDir = LocalDirs.jvmDir(settings.localDir);
      this.localDir = new File(jvmDir, id.operatorId() + "_" + id.partitionId() + "_" + id.storeName() + "_"
          + java.util.UUID.randomUUID());
    } catch (IOException e) {
      throw new IllegalStateException("statestore: cannot initialise " + storeIdString + ": " + e.getMessage(), e);
    }
    codecs.put(LocalStore.DEFAULT_CF, new RowCodec(keySchema, valueSchema, spec, multipleValuesPerKey));
  }

  @Override
  public StateStoreId stateStoreId() {
    return storeId;
  }

  String storeIdString() {
    return storeIdString;
  }

  RowCodec codec(String cf) {
    return codecs.get(cf);
  }

  void registerCodec(String cf, RowCodec codec) {
    codecs.putIfAbsent(cf, codec);
  }

  LastCommit lastCommit() {
    return lastCommit;
  }

  long lastLoadMs() {
    return lastLoadMs;
  }

  @Override
  public synchronized StateStore getStore(long version, scala.Option<String> uniqueId, boolean readOnly,
      boolean forceSnapshotOnCommit) {
    if (version < 0) throw new IllegalArgumentException("Version cannot be less than 0: " + version);
    if (current != null) current.closeScans();
    long start = System.nanoTime();
    try {
      load(version);
    } catch (IOException | RocksDBException e) {
      closeLocal();
      throw new IllegalStateException("statestore: cannot load version " + version + " of store " + storeIdString
          + " from " + checkpoint.dir + ": " + e.getMessage(), e);
    }
    lastLoadMs = (System.nanoTime() - start) / 1_000_000;
    current = new StatestoreStore(this, local, version, readOnly);
    return current;
  }

  /** Brings the local store to {@code version}: reuse, catch up with increments, or restore. */
  private void load(long version) throws IOException, RocksDBException {
    if (local != null && !localDirty && local.version() == version) return;
    CheckpointDir.Listing listing = checkpoint.list();
    staleAbove = listing.latest() > version ? version : Long.MAX_VALUE;
    if (local != null && !localDirty && local.version() < version
        && listing.increments().subSet(local.version() + 1, true, version, true).size() == version - local.version()) {
      for (long v = local.version() + 1; v <= version; v++) {
        local.apply(checkpoint.readIncrement(v), checkpoint.incrementPath(v).toString());
      }
      return;
    }
    restore(version, listing);
  }

  private void restore(long version, CheckpointDir.Listing listing) throws IOException, RocksDBException {
    closeLocal();
    LocalDirs.deleteRecursively(localDir);
    Long snapshot = listing.snapshots().floor(version);
    if (snapshot != null) {
      SnapshotManifest m = checkpoint.downloadSnapshot(snapshot, localDir);
      if (!storeIdString.equals(m.storeId)) {
        throw new IOException("Snapshot " + checkpoint.snapshotPath(snapshot) + " belongs to store '" + m.storeId
            + "', not '" + storeIdString + "'");
      }
    }
    local = LocalStore.open(localDir, storeIdString, settings);
    localDirty = false;
    long base = snapshot == null ? 0 : snapshot;
    if (local.version() != base) {
      throw new IOException("Snapshot " + checkpoint.snapshotPath(base) + " holds version " + local.version()
          + ", its manifest says " + base);
    }
    lastSnapshotVersion = base;
    for (long v = base + 1; v <= version; v++) {
      local.apply(checkpoint.readIncrement(v), checkpoint.incrementPath(v).toString());
    }
    LOG.info("statestore: restored {} at version {} from snapshot {} and {} increments", storeIdString, version,
        base, version - base);
  }

  /** Commit step of a store: local meta, then the increment, durable, then the coordinator. */
  synchronized long commit(LocalStore store) {
    long start = System.nanoTime();
    try {
      Increment inc = store.commit();
      if (staleAbove != Long.MAX_VALUE) {
        checkpoint.supersedeFrom(inc.version);
        staleAbove = Long.MAX_VALUE;
      }
      byte[] bytes = IncrementCodec.encode(inc, settings.zstdLevel);
      checkpoint.writeIncrement(inc.version, bytes);
      if (inc.version - lastSnapshotVersion >= settings.minDeltasForSnapshot) snapshot(store);
      if (settings.commitValidation) StateStore.reportCommitToCoordinator(inc.version, storeId, hadoopConf);
      lastCommit = new LastCommit(bytes.length, inc.size, (System.nanoTime() - start) / 1_000_000);
      return inc.version;
    } catch (IOException | RocksDBException | RuntimeException e) {
      localDirty = true;
      throw new IllegalStateException("statestore: commit of store " + storeIdString + " failed: " + e.getMessage(), e);
    }
  }

  /** A local RocksDB checkpoint now (cheap, hard links); the upload runs in the background. */
  private void snapshot(LocalStore store) throws RocksDBException {
    if (pendingUpload != null && !pendingUpload.isDone()) return;
    long version = store.version();
    File staging = new File(localDir.getPath() + ".snapshot-" + version);
    LocalDirs.deleteRecursively(staging);
    store.checkpointTo(staging);
    lastSnapshotVersion = version;
    CheckpointDir target = checkpoint;
    int keep = settings.minVersionsToRetain;
    pendingUpload = UPLOADS.submit(() -> {
      try {
        target.uploadSnapshot(version, storeIdString, staging);
        target.retain(keep);
      } catch (IOException | RuntimeException e) {
        LOG.warn("statestore: snapshot {} of {} not uploaded: {}", version, storeIdString, e.toString());
      } finally {
        LocalDirs.deleteRecursively(staging);
      }
    });
  }

  synchronized void abort(LocalStore store) {
    // Writes went straight into the database: the next load restores rather than trust it.
    localDirty = true;
  }

  @Override
  public void doMaintenance() {
    try {
      checkpoint.retain(settings.minVersionsToRetain);
    } catch (IOException e) {
      LOG.warn("statestore: retention of {} failed: {}", storeIdString, e.toString());
    }
  }

  @Override
  public scala.collection.immutable.Seq<StateStoreCustomMetric> supportedCustomMetrics() {
    return Scala.seq(Metrics.ALL);
  }

  private void closeLocal() {
    if (current != null) current.closeScans();
    if (local != null) {
      local.close();
      local = null;
    }
  }

  @Override
  public synchronized void close() {
    Future<?> upload = pendingUpload;
    if (upload != null) {
      try {
        upload.get(60, TimeUnit.SECONDS);
      } catch (Exception e) {
        LOG.warn("statestore: pending snapshot upload of {} did not finish: {}", storeIdString, e.toString());
      }
    }
    closeLocal();
    if (localDir != null) LocalDirs.deleteRecursively(localDir);
  }

  @Override
  public String toString() {
    return "StatestoreProvider[" + storeIdString + "]";
  }
}
