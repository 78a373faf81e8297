package io.statestore.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.streaming.state.KeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreCheckpointInfo;
import org.apache.spark.sql.execution.streaming.state.StateStoreCustomMetric;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreIterator;
import org.apache.spark.sql.execution.streaming.state.StateStoreMetrics;
import org.apache.spark.sql.execution.streaming.state.UnsafeRowPair;
import org.apache.spark.sql.types.StructType;
import org.rocksdb.RocksDBException;

/**
 * One version of a store partition handed to a task: reads, writes, then commit, abort or release. Handed out
 * with its last increment still pending ({@link PartialMerge}, DESIGN.md section 4), it routes reads and writes
 * through the partial merge until the increment is applied, and waits for it where the whole store is needed
 * (scans, counts, column families, metrics, commit).
 */
public final class StatestoreStore implements StateStore {
  private enum State { UPDATING, COMMITTED, ABORTED, RELEASED }

  private final StatestoreProvider provider;
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
  // The key of the last get() and whether it existed: put() right after get() skips a lookup for the count.
  private String lastCf;
  private byte[] lastKey;
  private boolean lastExisted;

  StatestoreStore(StatestoreProvider provider, LocalStore local, long baseVersion, PartialMerge partial) {
    SparkLine.initStore(this);
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

  private boolean hasColumnFamily(String cf) {
    return overlaid() ? partial.hasColumnFamily(cf) : local.hasColumnFamily(cf);
  }

  @Override
  public StateStoreId id() {
    return provider.stateStoreId();
  }

  @Override
  public long version() {
    return baseVersion;
  }

  private RowCodec codec(String cf) {
    RowCodec c = provider.codec(cf);
    if (c == null || !hasColumnFamily(cf)) {
      throw new IllegalArgumentException("Column family '" + cf + "' does not exist in " + provider.storeIdString());
    }
    return c;
  }

  private void checkWritable(String op) {
    if (state != State.UPDATING) throw new IllegalStateException("Cannot " + op + " after " + state + ": " + this);
  }

  private static RuntimeException fail(String op, RocksDBException e) {
    return new IllegalStateException("statestore " + op + " failed: " + e.getMessage(), e);
  }

  @Override
  public UnsafeRow get(UnsafeRow key, String cf) {
    RowCodec c = codec(cf);
    byte[] k = c.encodeKey(key);
    try {
      if (overlaid()) return c.decodeValue(partial.get(cf, k));
      byte[] v = local.read(cf, k);
      lastCf = cf;
      lastKey = k;
      lastExisted = v != null;
      return c.decodeValue(v);
    } catch (RocksDBException e) {
      throw fail("get", e);
    }
  }

  public boolean keyExists(UnsafeRow key, String cf) {
    byte[] k = codec(cf).encodeKey(key);
    if (!overlaid()) return local.exists(cf, k);
    try {
      return partial.get(cf, k) != null;
    } catch (RocksDBException e) {
      throw fail("keyExists", e);
    }
  }

  @Override
  public scala.collection.Iterator<UnsafeRow> valuesIterator(UnsafeRow key, String cf) {
    RowCodec c = codec(cf);
    try {
      byte[] k = c.encodeKey(key);
      return Scala.iterator(c.decodeValues(overlaid() ? partial.get(cf, k) : local.get(cf, k)).iterator());
    } catch (RocksDBException e) {
      throw fail("valuesIterator", e);
    }
  }

  /** Whether {@code k} held a value, when the last get or write was of it (KeyPresence's answers). */
  private int knownBefore(String cf, byte[] k) {
    if (cf.equals(lastCf) && Arrays.equals(k, lastKey)) return lastExisted ? KeyPresence.PRESENT : KeyPresence.ABSENT;
    return KeyPresence.UNKNOWN;
  }

  private void rememberWrite(String cf, byte[] k, boolean exists) {
    lastCf = cf;
    lastKey = k;
    lastExisted = exists;
  }

  @Override
  public void put(UnsafeRow key, UnsafeRow value, String cf) {
    checkWritable("put");
    if (key == null || value == null) throw new IllegalArgumentException("put needs a key and a value");
    RowCodec c = codec(cf);
    byte[] k = c.encodeKey(key);
    if (overlaid()) {
      partial.put(cf, k, c.encodeValue(value));
      return;
    }
    try {
      local.put(cf, k, c.encodeValue(value), knownBefore(cf, k));
      rememberWrite(cf, k, true);
    } catch (RocksDBException e) {
      throw fail("put", e);
    }
  }

  public void putList(UnsafeRow key, UnsafeRow[] values, String cf) {
    checkWritable("putList");
    SparkLine.checkListAccepted("putList", values.length);
    RowCodec c = codec(cf);
    if (!c.multiValue) throw new UnsupportedOperationException("putList needs a multi-value column family");
    byte[] k = c.encodeKey(key);
    if (overlaid()) {
      partial.put(cf, k, c.encodeValues(values));
      return;
    }
    try {
      local.put(cf, k, c.encodeValues(values), knownBefore(cf, k));
      rememberWrite(cf, k, true);
    } catch (RocksDBException e) {
      throw fail("putList", e);
    }
  }

  @Override
  public void remove(UnsafeRow key, String cf) {
    checkWritable("remove");
    byte[] k = codec(cf).encodeKey(key);
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

  public void deleteRange(UnsafeRow begin, UnsafeRow end, String cf) {
    checkWritable("deleteRange");
    settled();
    RowCodec c = codec(cf);
    List<byte[]> doomed = new ArrayList<>();
    byte[] from = c.encodeKey(begin);
    byte[] until = c.encodeKey(end);
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

  @Override
  public void merge(UnsafeRow key, UnsafeRow value, String cf) {
    checkWritable("merge");
    RowCodec c = codec(cf);
    if (!c.multiValue) throw new UnsupportedOperationException("merge needs a multi-value column family");
    try {
      byte[] k = c.encodeKey(key);
      if (overlaid()) {
        partial.merge(cf, k, c.encodeValue(value));
        return;
      }
      local.merge(cf, k, c.encodeValue(value));
      rememberWrite(cf, k, true);
    } catch (RocksDBException e) {
      throw fail("merge", e);
    }
  }

  public void mergeList(UnsafeRow key, UnsafeRow[] values, String cf) {
    checkWritable("mergeList");
    SparkLine.checkListAccepted("mergeList", values.length);
    RowCodec c = codec(cf);
    if (!c.multiValue) throw new UnsupportedOperationException("mergeList needs a multi-value column family");
    try {
      byte[] k = c.encodeKey(key);
      if (overlaid()) {
        partial.merge(cf, k, c.encodeValues(values));
        return;
      }
      local.merge(cf, k, c.encodeValues(values));
      rememberWrite(cf, k, true);
    } catch (RocksDBException e) {
      throw fail("mergeList", e);
    }
  }

  private StateStoreIterator<UnsafeRowPair> scan(String cf, byte[] prefix, byte[] from, byte[] until,
      boolean flatten) {
    settled();
    RowCodec c = codec(cf);
    ScanIterator s = new ScanIterator(local.iterator(cf), c, prefix, from, until, flatten);
    synchronized (openScans) {
      openScans.add(s);
    }
    return Scala.storeIterator(s, s::close);
  }

  @Override
  public StateStoreIterator<UnsafeRowPair> iterator(String cf) {
    return scan(cf, null, null, null, false);
  }

  public StateStoreIterator<UnsafeRowPair> iteratorWithMultiValues(String cf) {
    return scan(cf, null, null, null, codec(cf).multiValue);
  }

  @Override
  public StateStoreIterator<UnsafeRowPair> prefixScan(UnsafeRow prefix, String cf) {
    return scan(cf, codec(cf).encodePrefix(prefix), null, null, false);
  }

  public StateStoreIterator<UnsafeRowPair> prefixScanWithMultiValues(UnsafeRow prefix, String cf) {
    RowCodec c = codec(cf);
    return scan(cf, c.encodePrefix(prefix), null, null, c.multiValue);
  }

  public StateStoreIterator<UnsafeRowPair> rangeScan(scala.Option<UnsafeRow> start, scala.Option<UnsafeRow> end,
      String cf) {
    RowCodec c = codec(cf);
    return scan(cf, null, start.isDefined() ? c.encodeKey(start.get()) : null,
        end.isDefined() ? c.encodeKey(end.get()) : null, false);
  }

  public StateStoreIterator<UnsafeRowPair> rangeScanWithMultiValues(scala.Option<UnsafeRow> start,
      scala.Option<UnsafeRow> end, String cf) {
    RowCodec c = codec(cf);
    return scan(cf, null, start.isDefined() ? c.encodeKey(start.get()) : null,
        end.isDefined() ? c.encodeKey(end.get()) : null, c.multiValue);
  }

  public scala.collection.immutable.Set<String> allColumnFamilyNames() {
    settled();
    return Scala.set(local.columnFamilies());
  }

  @Override
  public void createColFamilyIfAbsent(String cf, StructType keySchema, StructType valueSchema,
      KeyStateEncoderSpec spec, boolean multiValue, boolean isInternal) {
    provider.registerCodec(cf, new RowCodec(keySchema, valueSchema, spec, multiValue));
    if (hasColumnFamily(cf)) return;
    checkWritable("create column family");
    settled();
    try {
      local.createColumnFamily(cf);
    } catch (RocksDBException e) {
      throw fail("createColFamilyIfAbsent", e);
    }
  }

  @Override
  public boolean removeColFamilyIfExists(String cf) {
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

  @Override
  public long commit() {
    checkWritable("commit");
    settled();
    if (baseLineage == null) baseLineage = partial.baseLineage();
    committedVersion = provider.commit(local);
    committedLineage = local.lineage();
    state = State.COMMITTED;
    return committedVersion;
  }

  @Override
  public void abort() {
    if (state == State.COMMITTED) return;
    closeScans();
    if (state == State.UPDATING) {
      if (partial != null && !partial.discard()) provider.distrust(local);
      provider.abort(local);
    }
    state = State.ABORTED;
  }

  public void release() {
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

  @Override
  public boolean hasCommitted() {
    return state == State.COMMITTED;
  }

  @Override
  public StateStoreMetrics metrics() {
    if (state == State.UPDATING) settled();
    Map<StateStoreCustomMetric, Object> custom = new HashMap<>();
    StatestoreProvider.LastCommit lc = provider.lastCommit();
    custom.put(Metrics.INCREMENT_BYTES, lc.incrementBytes());
    custom.put(Metrics.INCREMENT_RECORDS, lc.incrementRecords());
    custom.put(Metrics.COMMIT_TIME, lc.commitMs());
    custom.put(Metrics.COMMIT_PREPARE_TIME, lc.prepareMs());
    custom.put(Metrics.COMMIT_ENCODE_TIME, lc.encodeMs());
    custom.put(Metrics.COMMIT_WRITE_TIME, lc.writeMs());
    StatestoreProvider.LastSnapshot ls = provider.lastSnapshot();
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
    return SparkLine.storeMetrics(local.totalCount(), local.memoryBytes(), Scala.map(custom));
  }

  @Override
  public StateStoreCheckpointInfo getStateStoreCheckpointInfo() {
    if (baseLineage == null) baseLineage = partial.baseLineage();
    if (state == State.COMMITTED) {
      return new StateStoreCheckpointInfo(id().partitionId(), committedVersion, CheckpointIds.of(committedLineage),
          CheckpointIds.of(baseLineage));
    }
    return new StateStoreCheckpointInfo(id().partitionId(), baseVersion, CheckpointIds.of(baseLineage),
        scala.Option.empty());
  }

  @Override
  public String toString() {
    return "StatestoreStore[" + provider.storeIdString() + ", version " + baseVersion + ", " + state + "]";
  }
}
