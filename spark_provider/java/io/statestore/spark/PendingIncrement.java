package io.statestore.spark;

import java.io.IOException;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import org.rocksdb.RocksDBException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The last increment a load lacks (version {@code v}), read and applied on a background thread to the store at
 * {@code v-1} that the task already writes through an {@link Overlay} (DESIGN.md section 4, partial-state merge).
 * Three phases, in order: <b>reading</b> (the increment is not here yet), <b>decoded</b> (it is known which keys
 * it touches; untouched keys hold at {@code v-1} what they hold at {@code v}), <b>applied</b> (the store is at
 * {@code v}, its lineage checked); or <b>failed</b> at any point, which the task sees as an exception at its next
 * call that needs the increment, and at commit.
 *
 * <p>The store is shared. The task reads the base store only for keys the increment does not touch
 * ({@link #valueAt}), whose value the apply does not change, so such a read may run while it is applied; except
 * when the increment creates or drops column families (the store's handles change): then the apply holds this
 * object's monitor, and those reads take it too. Nothing else of the store is touched by the task until
 * {@link #awaitApplied} returned. Writes never wait for the monitor ({@link #applied} does not take it).
 */
final class PendingIncrement {
  private static final Logger LOG = LoggerFactory.getLogger(PendingIncrement.class);
  private static final ExecutorService READERS = Executors.newCachedThreadPool(r -> {
    Thread t = new Thread(r, "statestore-last-increment");
    t.setDaemon(true);
    return t;
  });

  /** Reads the increment (from the checkpoint location, behind the {@code last-increment} fault point). */
  interface Reader {
    Increment read() throws IOException;
  }

  /** Runs between decoding and applying (the {@code last-increment-apply} fault point). */
  interface BeforeApply {
    void run();
  }

  /** Why the store, once at {@code v}, is not on the history the load wants; null when it is. */
  interface Check {
    String mismatch(LocalStore store) throws IOException;
  }

  private enum Phase { READING, DECODED, APPLIED, FAILED }

  /** A key's value at {@code v} read while the increment is pending: {@code applied} says the increment got there
   * first and nothing was read (the caller merges and reads the store itself). */
  record Base(boolean applied, byte[] value) {}

  final long version;
  private final LocalStore store;
  private final String file;
  private final Reader reader;
  private final BeforeApply beforeApply;
  private final Check check;
  /** Column families of the store at {@code v-1}, taken before the background thread starts. */
  private final Set<String> baseCfs;
  private final long startNanos = System.nanoTime();
  private volatile Phase phase = Phase.READING;
  private volatile Exception failure;
  /** Keys the increment puts, deletes or merges, per column family; and families it drops or creates: every key
   * of those counts as touched. */
  private final Map<String, Set<ChangeSet.Key>> touched = new HashMap<>();
  private final Set<String> touchedWhole = new HashSet<>();
  /** The increment creates or drops a column family: reads of the base store wait for the apply to end. */
  private boolean changesColumnFamilies;
  private volatile long decodedNanos;
  private volatile long appliedNanos;
  private byte[] lineageAtVersion;
  private volatile int overlayWrites = -1;
  private int readsFromBase;
  private int readsAfterApply;

  PendingIncrement(LocalStore store, long version, String file, Reader reader, BeforeApply beforeApply,
      Check check) {
    this.store = store;
    this.version = version;
    this.file = file;
    this.reader = reader;
    this.beforeApply = beforeApply;
    this.check = check;
    this.baseCfs = store.columnFamilies();
  }

  /** Starts reading and applying in the background. */
  void start() {
    LOG.info("statestore: {} opened at version {} with an overlay for the batch; increment {} is read in the "
        + "background", store.storeId, version - 1, version);
    READERS.execute(this::run);
  }

  private void run() {
    try {
      Increment inc = reader.read();
      synchronized (this) {
        index(inc);
        phase = Phase.DECODED;
        decodedNanos = System.nanoTime();
        notifyAll();
      }
      beforeApply.run();
      if (changesColumnFamilies) {
        synchronized (this) {
          store.apply(inc, file);
        }
      } else {
        store.apply(inc, file); // reads of keys it does not touch go on meanwhile
      }
      synchronized (this) {
        String mismatch = check.mismatch(store);
        if (mismatch != null) throw new IOException(mismatch);
        lineageAtVersion = store.lineage();
        phase = Phase.APPLIED;
        appliedNanos = System.nanoTime();
        notifyAll();
      }
      LOG.info("statestore: {} increment {} applied {} ms after the load handed out version {} (read in {} ms)",
          store.storeId, version, (appliedNanos - startNanos) / 1_000_000, version,
          (decodedNanos - startNanos) / 1_000_000);
    } catch (IOException | RocksDBException | RuntimeException e) {
      synchronized (this) {
        failure = e;
        phase = Phase.FAILED;
        notifyAll();
      }
      LOG.warn("statestore: {} increment {} could not be applied behind the batch's overlay: {}; the task fails",
          store.storeId, version, e.toString());
    }
  }

  private void index(Increment inc) {
    for (int i = 0; i < inc.size; i++) {
      String cf = inc.cfTable.get(inc.cfIndex[i]).name;
      if (inc.ops[i] == Increment.DROP_COLUMN_FAMILY) touchedWhole.add(cf);
      else touched.computeIfAbsent(cf, n -> new HashSet<>()).add(new ChangeSet.Key(inc.keys[i]));
    }
    for (Increment.CfEntry e : inc.cfTable) {
      if (e.exists != baseCfs.contains(e.name)) touchedWhole.add(e.name);
    }
    changesColumnFamilies = !touchedWhole.isEmpty();
  }

  /** Whether column family {@code cf} existed at {@code v-1} (the caller writes to it through the overlay). */
  boolean hadColumnFamily(String cf) {
    return baseCfs.contains(cf);
  }

  /** Whether the store is at {@code v}; throws the background failure. Neither waits nor takes the monitor. */
  boolean applied() {
    Phase p = phase;
    if (p == Phase.FAILED) throw failed();
    return p == Phase.APPLIED;
  }

  /**
   * The value of {@code key} at {@code v}: waits until the increment is decoded; a key it does not touch is read
   * from the store at once, else this waits until it is applied (and returns {@code applied}).
   */
  Base valueAt(String cf, byte[] key) throws RocksDBException {
    synchronized (this) {
      while (phase == Phase.READING) await();
      if (phase == Phase.FAILED) throw failed();
      if (phase == Phase.DECODED && !touches(cf, key)) {
        readsFromBase++;
        if (changesColumnFamilies) return new Base(false, store.get(cf, key)); // the apply is not under way
      } else {
        while (phase == Phase.DECODED) await();
        if (phase == Phase.FAILED) throw failed();
        readsAfterApply++;
        return new Base(true, null);
      }
    }
    return new Base(false, store.get(cf, key)); // untouched: the same before, during and after the apply
  }

  private boolean touches(String cf, byte[] key) {
    if (touchedWhole.contains(cf)) return true;
    Set<ChangeSet.Key> keys = touched.get(cf);
    return keys != null && keys.contains(new ChangeSet.Key(key));
  }

  /** Waits until the store is at {@code v}; throws the background failure. */
  synchronized void awaitApplied() {
    while (phase == Phase.READING || phase == Phase.DECODED) await();
    if (phase == Phase.FAILED) throw failed();
  }

  /** Waits until the background thread is done with the store, whatever the outcome; true when it is at
   * {@code v}. Not interrupted: the store must not be closed under the background thread. */
  synchronized boolean awaitEnd() {
    boolean interrupted = false;
    while (phase == Phase.READING || phase == Phase.DECODED) {
      try {
        wait();
      } catch (InterruptedException e) {
        interrupted = true;
      }
    }
    if (interrupted) Thread.currentThread().interrupt();
    return phase == Phase.APPLIED;
  }

  synchronized boolean failedAlready() {
    return phase == Phase.FAILED;
  }

  private void await() {
    try {
      wait();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("statestore: interrupted waiting for increment " + version + " of "
          + store.storeId, e);
    }
  }

  private IllegalStateException failed() {
    return new IllegalStateException("statestore: increment " + version + " of store " + store.storeId
        + " could not be applied behind the batch's writes (partial merge), so the batch cannot go on: "
        + failure.getMessage(), failure);
  }

  /** Lineage of version {@code v}, once applied. */
  synchronized byte[] lineageAtVersion() {
    return lineageAtVersion;
  }

  /** The overlay of {@code writes} writes was merged on top of the applied increment. */
  void merged(int writes) {
    overlayWrites = writes;
  }

  // ------------------------------------------------------------------ figures, for metrics, logs and tests

  /** Writes the batch's overlay took before the increment was applied (-1: not merged yet). */
  int overlayWrites() {
    return overlayWrites;
  }

  /** How long after the load handed out the store the increment was applied (0: not yet). */
  long pendingMillis() {
    long a = appliedNanos;
    return a == 0 ? 0 : (a - startNanos) / 1_000_000;
  }

  /** System.nanoTime() when the load handed out the store, the increment was decoded, applied (0: not yet). */
  long startNanos() {
    return startNanos;
  }

  long decodedNanos() {
    return decodedNanos;
  }

  long appliedNanos() {
    return appliedNanos;
  }

  /** Reads answered from the store at {@code v-1} (keys the increment does not touch), and reads that waited
   * until the increment was applied. */
  synchronized int readsFromBase() {
    return readsFromBase;
  }

  synchronized int readsAfterApply() {
    return readsAfterApply;
  }

  /** One line for the load's report. */
  String summary() {
    int w = overlayWrites;
    long ms = pendingMillis();
    if (w < 0) return "partial: increment " + version + " pending";
    return "partial: overlay took " + w + " writes before increment " + version + " arrived (applied " + ms
        + " ms after the load)";
  }
}
