package io.statestore.spark;

import java.util.ArrayDeque;

/**
 * Writes committed batches into their RocksDB databases (LocalStore) on one background thread, at a quiet point:
 * when no task of this JVM uses a state store. The partitions of a query commit together; a write started at
 * once would take a core from the commits and tasks still under way (on the two-core bench machine, every commit
 * of the micro-batch ran about 1.3x longer). A store needed before its write ran writes it itself (LocalStore).
 */
final class CommitWriter {
  private static final Object LOCK = new Object();
  private static final ArrayDeque<Runnable> QUEUE = new ArrayDeque<>();
  private static int tasksUsingStores;
  private static Thread thread;

  private CommitWriter() {}

  /** Queues {@code write}; it runs once no task uses a store (it must be harmless to run after its store did it). */
  static void submit(Runnable write) {
    synchronized (LOCK) {
      QUEUE.add(write);
      if (thread == null) {
        thread = new Thread(CommitWriter::run, "statestore-commit-writer");
        thread.setDaemon(true);
        thread.start();
      }
      LOCK.notifyAll();
    }
  }

  /** A task started using a store of this JVM; it calls {@link #taskDone} when it ends. */
  static void taskUsing() {
    synchronized (LOCK) {
      tasksUsingStores++;
    }
  }

  static void taskDone() {
    synchronized (LOCK) {
      tasksUsingStores = Math.max(0, tasksUsingStores - 1);
      LOCK.notifyAll();
    }
  }

  private static void run() {
    while (true) {
      Runnable next;
      synchronized (LOCK) {
        while (QUEUE.isEmpty() || tasksUsingStores > 0) {
          try {
            LOCK.wait();
          } catch (InterruptedException e) {
            return;
          }
        }
        next = QUEUE.poll();
      }
      try {
        next.run();
      } catch (RuntimeException e) {
        org.slf4j.LoggerFactory.getLogger(CommitWriter.class).warn("statestore: a commit's write failed", e);
      }
    }
  }
}
