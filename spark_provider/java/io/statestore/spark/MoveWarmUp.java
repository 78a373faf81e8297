package io.statestore.spark;

import java.io.File;
import java.util.concurrent.CountDownLatch;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Runs, once per executor JVM at its start, the branches of the store's read and write path that only a moved
 * partition's first batch takes: a store handed out with its last increment pending (the partial merge's overlay,
 * then its merge), and writes of keys the batch never read (the merge replays them). On a throwaway store in a
 * directory of its own, a few thousand calls, well under a second.
 *
 * <p>Why: HotSpot's optimizing compiler treats a branch its profile never saw taken as unreachable and compiles
 * a trap in its place. Spark's stateful operator loop inlines the store's get and put (down to {@link
 * StoreSession#read} and {@link StoreSession#put}); after an hour of batches on partitions loaded the usual way, the first move to this
 * executor took those branches, and the trap threw the operator loop's compiled code away: it ran interpreted,
 * then was compiled again, 0.2 to 0.4 core-seconds in the move's micro-batch (the executors' compilation logs
 * on the migration bench: {@code null_assert} in {@code StatestoreStore.overlaid}, now {@code StoreSession.overlaid}, {@code unstable_if} in
 * {@code KeyPresence$Table.lookup} and {@code PartialMerge.pending}). Profiles are per method, shared by every
 * caller, and counts are never reset: once both sides of those branches are seen here, the operator loop's
 * compilation keeps them.
 */
final class MoveWarmUp {
  private static final Logger LOG = LoggerFactory.getLogger(MoveWarmUp.class);
  private static final String CF = LocalStore.DEFAULT_CF;
  private static final RowCodec CODEC = new RowCodec(1, 1, false, null);
  /** Calls on the usual path first: the profiles exist once the methods are warm enough to be profiled. */
  private static final int FIRST_CALLS = 4000;
  private static final int ROUNDS = 6;
  private static final int CALLS_PER_PHASE = 400;

  private MoveWarmUp() {}

  /** Runs the warm-up in a directory under {@code settings.localDir}; a failure is logged, never thrown. Returns
   * whether it ran through. */
  static boolean run(ProviderSettings settings) {
    long start = System.nanoTime();
    File dir = null;
    LocalStore local = null;
    try {
      dir = new File(LocalDirs.jvmDir(settings.localDir), "move_warm_up_" + java.util.UUID.randomUUID());
      local = LocalStore.open(dir, "warm-up", settings);
      direct(local, 0, FIRST_CALLS);
      for (int round = 0; round < ROUNDS; round++) {
        direct(local, round, CALLS_PER_PHASE);
        overlaid(local, round);
      }
      LOG.info("statestore: executor warmed up for moved partitions in {} ms", (System.nanoTime() - start) / 1_000_000);
      return true;
    } catch (Exception | LinkageError e) {
      LOG.info("statestore: warm-up for moved partitions skipped ({}); the first move here pays for it",
          e.toString());
      return false;
    } finally {
      if (local != null) local.close();
      if (dir != null) LocalDirs.deleteRecursively(dir);
    }
  }

  /** A batch on a store loaded the usual way: reads then writes of keys, some present, and writes of keys it did
   * not read; undone at the end. */
  static void direct(LocalStore local, int round, int calls) throws Exception {
    local.beginBatch();
    StoreSession store = new StoreSession(null, local, local.version(), null);
    for (int i = 0; i < calls; i++) {
      getAndPut(store, i, round);
      put(store, 1_000_000 + i, i); // never read: its presence is unknown
      if (i % 8 == 0) store.exists(CF, key(2_000_000 + i));
    }
    if (!local.rollback()) throw new IllegalStateException("the warm-up's writes could not be undone");
  }

  /** A batch on a store whose last increment is still pending: writes go to the overlay, reads of keys the
   * increment does not touch answer from the store, then the increment is applied and the overlay merged, and
   * the batch goes on directly; undone at the end (the increment stays applied). */
  static void overlaid(LocalStore local, int round) throws Exception {
    long base = local.version();
    Increment inc = new Increment(local.storeId, base + 1, base);
    int cf = inc.addCf(CF, true, local.count(CF) + CALLS_PER_PHASE);
    for (int i = 0; i < CALLS_PER_PHASE; i++) {
      inc.add(Increment.PUT, cf, row(3_000_000 + round * CALLS_PER_PHASE + i).getBytes(), new byte[16]);
    }
    CountDownLatch overlayUsed = new CountDownLatch(1);
    PendingIncrement pending = new PendingIncrement(local, base + 1, "the warm-up's increment", () -> inc,
        () -> await(overlayUsed), s -> null);
    pending.start();
    StoreSession store = new StoreSession(null, local, base + 1, new PartialMerge(pending, local));
    for (int i = 0; i < 2 * CALLS_PER_PHASE; i++) {
      if (i == CALLS_PER_PHASE) {
        // Both sides of the pending check, whatever the machine's speed: the increment is applied before the
        // second half, which merges the overlay at its first call and then goes on directly.
        overlayUsed.countDown();
        pending.awaitApplied();
      }
      getAndPut(store, i, round); // a key the increment does not touch: read from the store while it is pending
      put(store, 1_000_000 + i, i);
    }
    if (!store.settlePartial() || !local.rollback()) {
      throw new IllegalStateException("the warm-up's overlaid batch did not settle");
    }
  }

  /** A batch's read of key {@code n} and its write of the value read plus one ({@code round} when absent). */
  private static void getAndPut(StoreSession store, long n, long round) {
    UnsafeRow before = CODEC.decodeValue(store.read(CF, key(n)));
    put(store, n, before == null ? round : before.getLong(0) + 1);
  }

  private static void put(StoreSession store, long n, long value) {
    store.put("put", CF, key(n), CODEC.encodeValue(row(value)));
  }

  private static byte[] key(long n) {
    return CODEC.encodeKey(row(n));
  }

  private static void await(CountDownLatch latch) {
    try {
      latch.await();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  private static UnsafeRow row(long n) {
    UnsafeRow r = new UnsafeRow(1);
    r.pointTo(new byte[16], 16);
    r.setLong(0, n);
    return r;
  }
}
