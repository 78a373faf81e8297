package io.statestore.spark;

import org.rocksdb.RocksDBException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A batch run on a store whose last increment is still pending (DESIGN.md section 4, partial-state merge), from
 * the task's side: writes go to an {@link Overlay}; a read answers from the overlay when the batch's own put or
 * delete decides the key, else waits until the key's value at the version is known ({@link PendingIncrement});
 * once the increment is applied, the overlay is merged on top (at the task's next call: the store is only ever
 * written by one thread at a time) and the batch goes on directly on the store. Used by {@link StatestoreStore}
 * only while {@link #pending} is true; everything that needs the whole store (scans, counts, column families,
 * commit) calls {@link #settle} first.
 */
final class PartialMerge {
  private static final Logger LOG = LoggerFactory.getLogger(PartialMerge.class);

  private final PendingIncrement increment;
  private final LocalStore store;
  private final Overlay overlay = new Overlay();
  private boolean merged;

  PartialMerge(PendingIncrement increment, LocalStore store) {
    this.increment = increment;
    this.store = store;
  }

  /** True while the increment is not applied: the caller goes through this object. Once it is, merges the
   * overlay (once) and returns false. Throws the background failure. */
  boolean pending() {
    if (merged) return false;
    if (!increment.applied()) return true;
    merge();
    return false;
  }

  /** The value of {@code key} now (at the increment's version, with the batch's writes). */
  byte[] get(String cf, byte[] key) throws RocksDBException {
    Overlay.View view = overlay.view(cf, key);
    // The overlay's arrays go to the change set at the merge: the caller gets copies (rows over them are mutable).
    if (view != null && view.known) return view.value == null ? null : view.value.clone();
    PendingIncrement.Base base = increment.valueAt(cf, key);
    if (base.applied()) {
      merge();
      return store.get(cf, key);
    }
    return view == null ? base.value() : ChangeSet.concat(base.value(), view.value.clone());
  }

  void put(String cf, byte[] key, byte[] value) {
    overlay.put(cf, key, value);
  }

  void delete(String cf, byte[] key) {
    overlay.delete(cf, key);
  }

  void merge(String cf, byte[] key, byte[] operand) {
    overlay.merge(cf, key, operand);
  }

  /** Whether column family {@code cf} exists: one of the store's at the base version is taken as existing (a
   * write to one the increment drops fails at the merge, as it would have failed directly); another waits. */
  boolean hasColumnFamily(String cf) {
    if (increment.hadColumnFamily(cf)) return true;
    settle();
    return store.hasColumnFamily(cf);
  }

  /** Waits until the increment is applied and merges the overlay; throws the background failure. */
  void settle() {
    if (merged) return;
    increment.awaitApplied();
    merge();
  }

  /** The batch ends without committing: waits for the background thread and drops the overlay. True when the
   * store is sound (at the increment's version, on the history wanted). */
  boolean discard() {
    boolean sound = increment.awaitEnd();
    if (!merged) {
      merged = true; // nothing of the batch reached the store: nothing to undo
      LOG.info("statestore: {} batch at version {} ended before its overlay of {} writes was merged; dropped",
          store.storeId, increment.version, overlay.size());
    }
    return sound;
  }

  /** Lineage of the version the batch was loaded at; waits for it. */
  byte[] baseLineage() {
    increment.awaitApplied();
    return increment.lineageAtVersion();
  }

  private void merge() {
    if (merged) return;
    merged = true;
    store.beginBatch(); // the batch's start, for an abort, is the store at the increment's version
    long start = System.nanoTime();
    int writes;
    try {
      writes = overlay.replayOnto(store);
    } catch (RocksDBException e) {
      throw new IllegalStateException("statestore: merging the batch's overlay into " + store.storeId
          + " failed: " + e.getMessage(), e);
    }
    increment.merged(writes);
    LOG.info("statestore: {} overlay of {} writes merged on top of increment {} in {} ms ({} reads of keys it "
        + "does not touch answered before it was applied, {} waited for it)", store.storeId, writes,
        increment.version, (System.nanoTime() - start) / 1_000_000, increment.readsFromBase(),
        increment.readsAfterApply());
  }
}
