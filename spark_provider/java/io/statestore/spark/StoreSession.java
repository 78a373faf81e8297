package io.statestore.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.execution.streaming.state.StateStoreCustomMetric;
import org.rocksdb.RocksDBException;

/**
 * One version of a store partition handed to a task, in stored bytes: reads, writes, then commit, abort or release.
 * Each Spark line's {@code StatestoreStore} turns its contract's rows into these calls with a {@link RowCodec}.
 * Handed out with its last increment still pending ({@link PartialMerge}, DESIGN.md section 4), it routes reads and
 * writes through the partial merge until the increment is applied, and waits for it where the whole store is
 * needed (scans, counts, column families, metrics, commit).
 */
final class StoreSession {
  enum State { UPDATING, COMMITTED, ABORTED, RELEASED }

  private final ProviderCore provider;
  private final LocalStore local;
  private final long baseVersion;
  /** Non-null when the store was handed out before its last increment was applied. */
  private final PartialMerge partial;
  private final List<ScanIterator> openScans = new ArrayList<>();
  private volatile State state = State.UPDATING;
  private long committedVersion = -1;
  /** Lineages of the version loaded (with a partial merge: known once its increment is applied) and of the one
   * committed (formats.md 3.4): Spark's checkpoint ids (v2). */
  private byte[] baseLineage;
  private byte[] committedLineage;
  // The key of the last read and whether it existed: a put right after it skips a lookup for the count.
  private String lastCf;
  private byte[] lastKey;
  private boolean lastExisted;

  StoreSession(ProviderCore provider, LocalStore local, long baseVersion, PartialMerge partial) {
    this.provider = provider;
    this.local = local;
    this.baseVersion = baseVersion;
    this.partial = partial;
    this.baseLineage = partial == null ? local.lineage() : null;
  }

  /** True while the last increment is pending: the call goes through {@link #partial}. */
  private boolean overlaid() {
    if (partial == null || !partial.pending()) return false;
    lastKey = null;
    return true;
  }

  /** The whole store is needed: waits until the last increment is applied and the overlay merged. */
  private void settled() {
    if (partial != null) partial.settle();
  }

  /**
   * Before the provider loads again while this store is open (the write store after a read store, in one task):
   * the last increment applied and the overlay merged. False when that failed (the store is in doubt).
   */
  boolean settlePartial() {
    if (partial == null || state != State.UPDATING) return true;
    try {
      partial.settle();
      return true;
    } catch (RuntimeException e) {
      return false;
    }
  }

  /** Waits until a pending increment's background thread is done with the local store (before it is closed). */
  void awaitPartial() {
    if (partial != null) partial.discard();
  }

  ProviderCore provider() {
    return provider;
  }

  long version() {
    return baseVersion;
  }

  State state() {
    return state;
  }

  boolean hasColumnFamily(String cf) {
    return overlaid() ? partial.hasColumnFamily(cf) : local.hasColumnFamily(cf);
  }

  void checkWritable(String op) {
    if (state != State.UPDATING) throw new IllegalStateException("Cannot " + op + " after " + state + ": " + this);
  }

  private static RuntimeException fail(String op, RocksDBException e) {
    return new IllegalStateException("statestore " + op + " failed: " + e.getMessage(), e);
  }

  /** The stored value of {@code k} (null when absent), remembered for a write of the same key that follows. */
  byte[] read(String cf, byte[] k) {
    try {
      if (overlaid()) return partial.get(cf, k);
      byte[] v = local.read(cf, k);
      lastCf = cf;
      lastKey = k;
      lastExisted = v != null;
      return v;
    } catch (RocksDBException e) {
      throw fail("get", e);
    }
  }

  /** The stored value of {@code k}, all its values for a multi-value key (null when absent). */
  byte[] readAll(String cf, byte[] k) {
    try {
      return overlaid() ? partial.get(cf, k) : local.get(cf, k);
    } catch (RocksDBException e) {
      throw fail("valuesIterator", e);
    }
  }

  boolean exists(String cf, byte[] k) {
    if (!overlaid()) return local.exists(cf, k);
    try {
      return partial.get(cf, k) != null;
    } catch (RocksDBException e) {
      throw fail("keyExists", e);
    }
  }

  /** Whether {@code k} held a value, when the last read or write was of it (KeyPresence's answers). */
  private int knownBefore(String cf, byte[] k) {
    if (cf.equals(lastCf) && Arrays.equals(k, lastKey)) return lastExisted ? KeyPresence.PRESENT : KeyPresence.ABSENT;
    return KeyPresence.UNKNOWN;
  }

  private void rememberWrite(String cf, byte[] k, boolean exists) {
    lastCf = cf;
    lastKey = k;
    lastExisted = exists;
  }

  void put(String op, String cf, byte[] k, byte[] v) {
    checkWritable(op);
    if (overlaid()) {
      partial.put(cf, k, v);
      return;
    }
    try {
      local.put(cf, k, v, knownBefore(cf, k));
      rememberWrite(cf, k, true);
    } catch (RocksDBException e) {
      throw fail(op, e);
    }
  }

  void remove(String cf, byte[] k) {
    checkWritable("remove");
    if (overlaid()) {
      partial.delete(cf, k);
      return;
    }
    try {
      local.delete(cf, k);
      rememberWrite(cf, k, false);
    } catch (RocksDBException e) {
      throw fail("remove", e);
    }
  }

  void merge(String op, String cf, byte[] k, byte[] operand) {
    checkWritable(op);
    try {
      if (overlaid()) {
        partial.merge(cf, k, operand);
        return;
      }
      local.merge(cf, k, operand);
      rememberWrite(cf, k, true);
    } catch (RocksDBException e) {
      throw fail(op, e);
    }
  }

  /** Removes every key in [from, until). */
  void deleteRange(String cf, byte[] from, byte[] until) {
    checkWritable("deleteRange");
    settled();
    List<byte[]> doomed = new ArrayList<>();
    try (org.rocksdb.RocksIterator it = local.iterator(cf)) {
      for (it.seek(from); it.isValid() && Arrays.compareUnsigned(it.key(), until) < 0; it.next()) doomed.add(it.key());
    }
    try {
      for (byte[] k : doomed) local.delete(cf, k);
      lastKey = null;
    } catch (RocksDBException e) {
      throw fail("deleteRange", e);
    }
  }

  /** A scan of one column family in key order ({@link ScanIterator}); closed at the latest when the provider
   * loads again. */
  ScanIterator scan(String cf, RowCodec codec, byte[] prefix, byte[] from, byte[] until, boolean flatten) {
    settled();
    ScanIterator s = new ScanIterator(local.iterator(cf), codec, prefix, from, until, flatten);
    synchronized (openScans) {
      openScans.add(s);
    }
    return s;
  }

  Set<String> columnFamilies() {
    settled();
    return local.columnFamilies();
  }

  void createColumnFamily(String cf) {
    if (hasColumnFamily(cf)) return;
    checkWritable("create column family");
    settled();
    try {
      local.createColumnFamily(cf);
    } catch (RocksDBException e) {
      throw fail("createColFamilyIfAbsent", e);
    }
  }

  boolean dropColumnFamily(String cf) {
    checkWritable("remove column family");
    settled();
    try {
      lastKey = null;
      return local.dropColumnFamily(cf);
    } catch (RocksDBException e) {
      throw fail("removeColFamilyIfExists", e);
    }
  }

  /** Iterators may outlive commit (complete mode reads after it); the provider closes them before reuse. */
  void closeScans() {
    synchronized (openScans) {
      for (ScanIterator s : openScans) s.close();
      openScans.clear();
    }
  }

  long commit() {
    checkWritable("commit");
    settled();
    if (baseLineage == null) baseLineage = partial.baseLineage();
    committedVersion = provider.commit(local);
    committedLineage = local.lineage();
    state = State.COMMITTED;
    return committedVersion;
  }

  void abort() {
    if (state == State.COMMITTED) return;
    closeScans();
    if (state == State.UPDATING) {
      if (partial != null && !partial.discard()) provider.distrust(local);
      provider.abort(local);
    }
    state = State.ABORTED;
  }

  void release() {
    closeScans();
    if (state == State.UPDATING) {
      if (partial != null && !partial.discard()) provider.distrust(local);
      provider.abort(local); // undoes the batch's writes, if any
    }
    state = State.RELEASED;
  }

  /** Whether this store may still write to the local database (the provider's snapshot waits for it). */
  boolean writing() {
    return state == State.UPDATING;
  }

  boolean hasCommitted() {
    return state == State.COMMITTED;
  }

  /** The version committed (-1 before a commit). */
  long committedVersion() {
    return committedVersion;
  }

  /** The lineage of the version loaded (formats.md 3.4). */
  byte[] baseLineage() {
    if (baseLineage == null) baseLineage = partial.baseLineage();
    return baseLineage;
  }

  byte[] committedLineage() {
    return committedLineage;
  }

  long keyCount() {
    return local.totalCount();
  }

  long memoryBytes() {
    return local.memoryBytes();
  }

  /** Our custom metrics of the last commit, snapshot and load ({@link Metrics}), whole once settled. */
  Map<StateStoreCustomMetric, Object> customMetrics() {
    if (state == State.UPDATING) settled();
    Map<StateStoreCustomMetric, Object> custom = new HashMap<>();
    ProviderCore.LastCommit lc = provider.lastCommit();
    custom.put(Metrics.INCREMENT_BYTES, lc.incrementBytes());
    custom.put(Metrics.INCREMENT_RECORDS, lc.incrementRecords());
    custom.put(Metrics.COMMIT_TIME, lc.commitMs());
    custom.put(Metrics.COMMIT_PREPARE_TIME, lc.prepareMs());
    custom.put(Metrics.COMMIT_ENCODE_TIME, lc.encodeMs());
    custom.put(Metrics.COMMIT_WRITE_TIME, lc.writeMs());
    ProviderCore.LastSnapshot ls = provider.lastSnapshot();
    custom.put(Metrics.SNAPSHOT_FLUSH_TIME, ls.flushMs());
    custom.put(Metrics.SNAPSHOT_CHECKPOINT_TIME, ls.checkpointMs());
    custom.put(Metrics.SNAPSHOT_UPLOAD_TIME, ls.uploadMs());
    StateLoader.Loaded load = provider.lastLoad();
    if (load != null) {
      custom.put(Metrics.LOAD_TIME, load.millis());
      custom.put(Metrics.LOAD_VERSIONS_APPLIED, load.versionsApplied());
      PendingIncrement p = load.pending();
      custom.put(Metrics.LOAD_OVERLAY_WRITES, p == null ? 0L : (long) Math.max(0, p.overlayWrites()));
      custom.put(Metrics.LOAD_INCREMENT_PENDING_TIME, p == null ? 0L : p.pendingMillis());
      custom.put(Metrics.LOAD_OPENED_AHEAD, load.openedAhead() ? 1L : 0L);
      for (Map.Entry<StateLoader.Source, StateStoreCustomMetric> e : Metrics.LOAD_SOURCE.entrySet()) {
        custom.put(e.getValue(), load.source() == e.getKey() ? 1L : 0L);
      }
    }
    custom.put(Metrics.SST_BYTES, local.sstBytes());
    custom.put(Metrics.MEMORY_BYTES, LocalStore.memoryShare());
    return custom;
  }

  @Override
  public String toString() {
    String id = provider == null ? local.storeId : provider.storeIdString();
    return "StatestoreStore[" + id + ", version " + baseVersion + ", " + state + "]";
  }
}
