package io.statestore.spark;

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.streaming.state.NoPrefixKeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreConf;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreIterator;
import org.apache.spark.sql.execution.streaming.state.UnsafeRowPair;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Two providers of one store partition in one JVM, as Spark has them when it unloads a partition's provider and
 * loads the partition again before the first is closed (a planned hand-over: a task of the batch in flight), beside
 * a real state node: tests/test_provider_takeover.py runs it and reads the node's log.
 *
 * <p>Usage: {@code TakeOverCheck <mode> <state root> <partition id> <local dir> <node socket>}, modes:
 * <ul>
 *   <li>{@code takeover}: provider 1 commits versions 1..3, then reads version 3 (a read store, aborted: Spark's
 *       read-only use); provider 2 of the same partition loads version 3 for writing, writes, provider 1 is closed,
 *       provider 2 commits version 4, loads and reads it, commits version 5, and is closed;</li>
 *   <li>{@code close-under-task}: provider 1 commits version 1, loads version 1 for writing and writes (a task still
 *       using the store); another thread closes the provider meanwhile; the task goes on writing and commits
 *       version 2; reports whether the close waited for the commit or returned at once (deferred);</li>
 *   <li>{@code takeover-busy}: provider 1 commits versions 1..3 and loads version 3 for writing (the previous
 *       batch's task, still writing); provider 2 loads version 4 from another thread meanwhile (the next batch's
 *       task, after Spark unloaded provider 1); provider 1's task commits version 4 a while later; reports where
 *       provider 2's state came from and whether its load waited for that commit;</li>
 *   <li>{@code close-own-thread}: the task's own thread closes the provider with its store open, then the task
 *       aborts (it failed): the close neither waits for itself nor hangs.</li>
 * </ul>
 * Prints {@code name=value} lines, then {@code done}, and exits at the next line on stdin (or its end): the test
 * reads the node's log meanwhile, since the local channel hands the node its notices in the background.
 */
public final class TakeOverCheck {
  private TakeOverCheck() {}

  static final StructType KEY = DataTypes.createStructType(
      new org.apache.spark.sql.types.StructField[] {DataTypes.createStructField("k", DataTypes.StringType, true)});
  private static final UnsafeProjection PROJECTION = UnsafeProjection.create(KEY);

  static UnsafeRow row(String value) {
    return PROJECTION.apply(new GenericInternalRow(new Object[] {UTF8String.fromString(value)})).copy();
  }

  static StatestoreProvider provider(String root, int partition, String localDir, String socket) {
    return provider(root, partition, localDir, socket, false);
  }

  static StatestoreProvider provider(String root, int partition, String localDir, String socket, boolean sync) {
    SQLConf sql = new SQLConf();
    sql.setConfString(ProviderSettings.PREFIX + "sync", Boolean.toString(sync));
    sql.setConfString(ProviderSettings.PREFIX + "localDir", localDir);
    sql.setConfString(ProviderSettings.PREFIX + "nodeSocket", socket);
    sql.setConfString(ProviderSettings.PREFIX + "replicationFactor", "1");
    sql.setConfString(ProviderSettings.PREFIX + "peerFetch", "never");
    sql.setConfString("spark.sql.streaming.stateStore.minDeltasForSnapshot", "1000"); // no background snapshot
    StateStoreConf conf = new StateStoreConf(sql, scala.collection.immutable.Map$.MODULE$.empty());
    StatestoreProvider provider = new StatestoreProvider();
    provider.init(new StateStoreId(root, 0, partition, "default"), KEY, KEY, new NoPrefixKeyStateEncoderSpec(KEY),
        false, conf, new Configuration(), false, scala.Option.empty());
    return provider;
  }

  /** Every key and value of the store, in key order. */
  static TreeMap<String, String> contents(StateStore store) {
    TreeMap<String, String> out = new TreeMap<>();
    StateStoreIterator<UnsafeRowPair> it = store.iterator("default");
    while (it.hasNext()) {
      UnsafeRowPair pair = it.next();
      out.put(pair.key().getUTF8String(0).toString(), pair.value().getUTF8String(0).toString());
    }
    it.close();
    return out;
  }

  static void put(StateStore store, String key, String value) {
    store.put(row(key), row(value), "default");
  }

  static void out(String name, Object value) {
    System.out.println(name + "=" + value);
  }

  /** The provider's local directory (private: read by reflection; null once given away). */
  static File localDir(StatestoreProvider provider) throws ReflectiveOperationException {
    java.lang.reflect.Field f = ProviderCore.class.getDeclaredField("localDir");
    f.setAccessible(true);
    return (File) f.get(provider);
  }

  private static void takeover(String root, int partition, String localDir, String socket) throws Exception {
    StatestoreProvider first = provider(root, partition, localDir, socket);
    for (long v = 0; v < 3; v++) {
      StateStore store = first.getStore(v, scala.Option.empty(), false, false);
      for (int i = 0; i <= v; i++) put(store, "k" + v + "-" + i, "v" + v);
      put(store, "shared", "written at " + (v + 1));
      store.commit();
    }
    StateStore read = first.getStore(3, scala.Option.empty(), false, false);
    TreeMap<String, String> before = contents(read);
    read.abort();
    File firstDir = localDir(first);
    out("first_keys", before.size());

    // Spark unloaded provider 1 (not closed yet) and loads the partition anew: provider 2.
    StatestoreProvider second = provider(root, partition, localDir, socket);
    StateStore store = second.getStore(3, scala.Option.empty(), false, false);
    StateLoader.Loaded load = second.lastLoad();
    out("second_source", load.source().label());
    out("second_from", load.fromVersion());
    out("second_applied", load.versionsApplied());
    out("second_passed", load.passedOver().isEmpty() ? "-" : load.passedOver().replace(' ', '_'));
    out("same_state", contents(store).equals(before));
    out("took_directory", firstDir != null && firstDir.equals(localDir(second)) && localDir(first) == null);
    put(store, "after", "written by provider 2");

    // Spark's maintenance closes provider 1 now, while provider 2's task writes.
    first.close();
    out("directory_kept", firstDir != null && new File(firstDir, "CURRENT").exists());
    out("second_commit", store.commit());
    store = second.getStore(4, scala.Option.empty(), false, false);
    TreeMap<String, String> after = contents(store);
    TreeMap<String, String> expected = new TreeMap<>(before);
    expected.put("after", "written by provider 2");
    out("second_state_after", after.equals(expected));
    out("second_source_after", second.lastLoad().source().label());
    put(store, "last", "x");
    out("second_commit_again", store.commit());
    second.close();
  }

  private static void takeoverBusy(String root, int partition, String localDir, String socket) throws Exception {
    StatestoreProvider first = provider(root, partition, localDir, socket);
    for (long v = 0; v < 3; v++) {
      StateStore store = first.getStore(v, scala.Option.empty(), false, false);
      put(store, "k" + v, "v" + v);
      store.commit();
    }
    StateStore previousTask = first.getStore(3, scala.Option.empty(), false, false);
    put(previousTask, "k3", "v3");

    AtomicReference<StateStore> loaded = new AtomicReference<>();
    AtomicReference<Throwable> failed = new AtomicReference<>();
    AtomicLong loadEnded = new AtomicLong();
    StatestoreProvider second = provider(root, partition, localDir, socket);
    Thread nextTask = new Thread(() -> {
      try {
        loaded.set(second.getStore(4, scala.Option.empty(), false, false));
        loadEnded.set(System.nanoTime());
      } catch (Throwable t) {
        failed.set(t);
      }
    }, "next-batch-task");
    nextTask.start();
    Thread.sleep(500); // the previous batch's task is still at work
    long committing = System.nanoTime();
    out("first_commit", previousTask.commit());
    nextTask.join(60_000);
    out("second_failed", failed.get() == null ? "-" : failed.get().toString().replace(' ', '_'));
    StateLoader.Loaded load = second.lastLoad();
    out("second_source", load.source().label());
    out("second_from", load.fromVersion());
    out("waited_for_commit", loadEnded.get() > committing);
    StateStore store = loaded.get();
    out("second_keys", contents(store).size());
    put(store, "k4", "v4");
    out("second_commit", store.commit());
    first.close();
    second.close();
  }

  private static void closeWaits(String root, int partition, String localDir, String socket) throws Exception {
    StatestoreProvider provider = provider(root, partition, localDir, socket);
    StateStore first = provider.getStore(0, scala.Option.empty(), false, false);
    put(first, "a", "1");
    first.commit();
    StateStore store = provider.getStore(1, scala.Option.empty(), false, false); // a task uses the store
    put(store, "b", "2");

    AtomicLong closeEnded = new AtomicLong();
    AtomicReference<Throwable> closeFailed = new AtomicReference<>();
    Thread closer = new Thread(() -> {
      try {
        provider.close();
        closeEnded.set(System.nanoTime());
      } catch (Throwable t) {
        closeFailed.set(t);
      }
    }, "spark-maintenance");
    closer.start();
    // Either the close waits for the task (TIMED_WAITING: the only wait before it is done with the store) or it
    // returns at once and closes once the task is done (a deferred close). Anything else (closing the store under
    // the task) fails the task's commit below.
    long deadline = System.nanoTime() + 60_000_000_000L;
    while (closer.isAlive() && closer.getState() != Thread.State.TIMED_WAITING && System.nanoTime() < deadline) {
      Thread.sleep(5);
    }
    Thread.sleep(300); // the task goes on a while: a close that waits goes on waiting
    boolean waiting = closer.isAlive() && closer.getState() == Thread.State.TIMED_WAITING && closeEnded.get() == 0;
    boolean returned = !closer.isAlive() && closeEnded.get() != 0;
    put(store, "c", "3"); // the task goes on writing: its store is not closed under it
    out("value_read_back", show(store.get(row("b"), "default")));
    long commitStarted = System.nanoTime();
    long version = store.commit();
    out("commit", version);
    closer.join(120_000);
    out("close_failed", closeFailed.get() == null ? "-" : closeFailed.get().toString().replace(' ', '_'));
    out("close_returned", !closer.isAlive() && closeFailed.get() == null);
    // waited: the close returned only after the commit started; deferred: it returned before, and the node's log
    // shows when the provider actually closed.
    String mode = waiting && closeEnded.get() > commitStarted ? "waited" : returned ? "deferred" : "other";
    out("close_mode", mode);
  }

  static String show(UnsafeRow r) {
    return r == null ? "null" : r.getUTF8String(0).toString();
  }

  private static void closeOwnThread(String root, int partition, String localDir, String socket) throws Exception {
    StatestoreProvider provider = provider(root, partition, localDir, socket);
    StateStore first = provider.getStore(0, scala.Option.empty(), false, false);
    put(first, "a", "1");
    first.commit();
    StateStore store = provider.getStore(1, scala.Option.empty(), false, false);
    put(store, "b", "2");
    provider.close(); // from the task's own thread: waiting would wait for itself
    out("closed", true);
    store.abort(); // the task fails
    out("aborted", true);
  }

  /** Commits version 1 of each provider (acked: sync), prints {@code warm=true}, waits for a line on stdin. */
  private static void warmThenWait(StatestoreProvider... providers) throws Exception {
    for (StatestoreProvider provider : providers) {
      StateStore first = provider.getStore(0, scala.Option.empty(), false, false);
      put(first, "a", "1");
      first.commit();
    }
    out("warm", true);
    System.out.flush();
    new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
  }

  /**
   * {@code sync-close}: with sync replication, version 1 is committed (acked by the replica); the check prints
   * {@code warm=true} and waits for a line on stdin (the test pauses the replica's node meanwhile); a task's commit
   * of version 2 then waits for an ack that does not come, and the provider is closed from another thread while it
   * waits. Reports whether the close returned before that commit (it must not wait behind a sync commit's network
   * wait) and what the commit returned.
   */
  private static void syncClose(String root, int partition, String localDir, String socket) throws Exception {
    StatestoreProvider provider = provider(root, partition, localDir, socket, true);
    warmThenWait(provider);
    StateStore store = provider.getStore(1, scala.Option.empty(), false, false);
    put(store, "b", "2");
    AtomicLong committedAt = new AtomicLong();
    AtomicLong version = new AtomicLong(-1);
    Thread task = new Thread(() -> {
      version.set(store.commit());
      committedAt.set(System.nanoTime());
    });
    task.start();
    while (task.isAlive() && !committing(provider)) Thread.sleep(10);
    Thread.sleep(200); // the commit is waiting for the replica's ack now
    provider.close();
    long closedAt = System.nanoTime();
    boolean stillWaiting = task.isAlive();
    task.join();
    out("close_returned_while_commit_waited", stillWaiting && closedAt < committedAt.get());
    out("committed_version", version.get());
  }

  /**
   * {@code sync-parallel}: with sync replication, partitions {@code partition} (A) and {@code partition + 1} (B)
   * commit version 1 (acked); the check prints {@code warm=true} and waits for a line on stdin (the test pauses
   * the replica's node meanwhile). A's commit of version 2 then waits for an ack that does not come; once it does,
   * B commits version 2 ({@code b_started=true}). The test checks that the node heard of B's version 2 while A
   * still waited ({@code a_returned=true} comes later): one partition's sync wait holds up no other's commits.
   */
  private static void syncParallel(String root, int partition, String localDir, String socket) throws Exception {
    StatestoreProvider a = provider(root, partition, localDir, socket, true);
    StatestoreProvider b = provider(root, partition + 1, localDir, socket, true);
    warmThenWait(a, b);
    StateStore storeA = a.getStore(1, scala.Option.empty(), false, false);
    StateStore storeB = b.getStore(1, scala.Option.empty(), false, false);
    put(storeA, "b", "2");
    put(storeB, "b", "2");
    Thread taskA = new Thread(() -> {
      storeA.commit();
      out("a_returned", true);
      System.out.flush();
    });
    taskA.start();
    while (taskA.isAlive() && !committing(a)) Thread.sleep(10);
    Thread taskB = new Thread(storeB::commit);
    taskB.start();
    out("b_started", true);
    System.out.flush();
    taskA.join();
    taskB.join();
    a.close();
    b.close();
  }

  /**
   * {@code sync-over-backlog} (run with {@code -Dstatestore.localChannel.maxQueuedBytes=1048576}): partition
   * {@code partition} (A, asynchronous) and {@code partition + 1} (B, sync) commit version 1; the check prints
   * {@code warm=true} and waits for a line on stdin (the test pauses the node meanwhile: nothing leaves the queue).
   * A then commits six increments of about 300 KiB (over the 1 MiB backlog bound: the later ones are dropped, to
   * be pulled), and B commits version 2 ({@code b_committing=true}); the test resumes the node. Both providers
   * close after B's commit returns: the node's release of B shows the version it had of it.
   */
  private static void syncOverBacklog(String root, int partition, String localDir, String socket) throws Exception {
    StatestoreProvider a = provider(root, partition, localDir, socket, false);
    StatestoreProvider b = provider(root, partition + 1, localDir, socket, true);
    warmThenWait(a, b);
    java.util.Random random = new java.util.Random(7);
    for (long v = 1; v <= 6; v++) {
      StateStore store = a.getStore(v, scala.Option.empty(), false, false);
      putNoise(store, random, "k" + v);
      store.commit();
    }
    // As large as A's: it would not fit under the bound either.
    StateStore storeB = b.getStore(1, scala.Option.empty(), false, false);
    putNoise(storeB, random, "b");
    out("b_committing", true);
    System.out.flush();
    out("b_committed", storeB.commit());
    System.out.flush();
    a.close();
    b.close();
  }

  /** About 300 KiB of incompressible values under keys {@code <prefix>-<i>}. */
  private static void putNoise(StateStore store, java.util.Random random, String prefix) {
    for (int i = 0; i < 300; i++) {
      byte[] noise = new byte[768];
      random.nextBytes(noise);
      put(store, prefix + "-" + i, java.util.Base64.getEncoder().encodeToString(noise));
    }
  }

  /** Whether the provider's commit left its monitor (its writer closed: the sync wait follows). */
  private static boolean committing(StatestoreProvider provider) throws ReflectiveOperationException {
    java.lang.reflect.Field f = ProviderCore.class.getDeclaredField("writerOpen");
    f.setAccessible(true);
    synchronized (provider) {
      return !f.getBoolean(provider);
    }
  }

  public static void main(String[] args) throws Exception {
    String mode = args[0];
    String root = args[1];
    int partition = Integer.parseInt(args[2]);
    String localDir = args[3];
    String socket = args[4];
    switch (mode) {
      case "takeover" -> takeover(root, partition, localDir, socket);
      case "takeover-busy" -> takeoverBusy(root, partition, localDir, socket);
      case "close-under-task" -> closeWaits(root, partition, localDir, socket);
      case "close-own-thread" -> closeOwnThread(root, partition, localDir, socket);
      case "sync-close" -> syncClose(root, partition, localDir, socket);
      case "sync-parallel" -> syncParallel(root, partition, localDir, socket);
      case "sync-over-backlog" -> syncOverBacklog(root, partition, localDir, socket);
      default -> throw new IllegalArgumentException("unknown mode " + mode);
    }
    System.out.println("done");
    System.out.flush();
    new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
  }
}
