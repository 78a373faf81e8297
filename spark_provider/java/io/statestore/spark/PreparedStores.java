package io.statestore.spark;

import java.io.File;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Copies of this executor's state-node replicas that a planned hand-over is about to move here, opened before the
 * batch that moves them (setting {@code openAhead}). The moved partition's first task then starts from an open
 * store a few versions behind, which {@link StateLoader} checks against the checkpoint location and catches up
 * like any replica copy, instead of waiting for the node to write a checkpoint and for RocksDB to open it.
 *
 * <p>One daemon thread per executor JVM asks the node every {@value #POLL_MS} ms which partitions the
 * controller's running operation moves here (local channel {@code INCOMING}), opens a copy of each the node holds
 * (a {@code MATERIALIZE} into a directory of its own), keeps it at the node's replica's version by applying the
 * increments the checkpoint location holds (the same increments the load would apply, off the moved task's path;
 * each checked to continue the copy's lineage), opens it anew when that fails or the replica got more than
 * {@value #MAX_BEHIND} versions ahead, and closes and deletes those no longer moving here (the move was served
 * elsewhere, failed, or its task loaded it). A copy is used at most once, by the first load of its partition here
 * ({@link #take}). Without the catch-up, a copy opened when its move was announced was two versions behind by the
 * move's batch (the controller steers once the copy is open, and Spark runs the next batch it plans).
 */
final class PreparedStores {
  private static final Logger LOG = LoggerFactory.getLogger(PreparedStores.class);
  static final long POLL_MS = 200;
  /** A copy this many versions behind its node's replica is caught up from the checkpoint location, not opened
   * anew. */
  static final long MAX_BEHIND = 10;
  private static final Map<String, LocalStore> OPENED = new HashMap<>();
  /** Partitions whose copy a load took, while the node still lists them (until the controller hears of the
   * promotion): not opened again. Guarded by OPENED. */
  private static final Set<String> TAKEN = new HashSet<>();
  private static Thread poller;
  private static org.apache.hadoop.conf.Configuration hadoopConf;

  private PreparedStores() {}

  /** Starts polling the node (once per JVM; nothing when the setting is off or there is no node). */
  static synchronized void start(ProviderSettings settings, org.apache.hadoop.conf.Configuration conf) {
    if (poller != null || !settings.openAhead) return;
    hadoopConf = conf;
    LocalChannel channel;
    try {
      channel = LocalChannel.of(settings);
    } catch (IOException e) {
      LOG.info("statestore: no copies opened ahead of moves ({})", e.toString());
      return;
    }
    if (channel == null) return;
    poller = new Thread(() -> run(channel, settings), "statestore-open-ahead");
    poller.setDaemon(true);
    poller.start();
  }

  /** The copy opened ahead for the partition, now the caller's (null if none): used once. */
  static LocalStore take(String storeId, org.apache.hadoop.fs.Path checkpointDir) {
    String key = key(storeId, normalized(checkpointDir));
    LocalStore store;
    synchronized (OPENED) {
      store = OPENED.remove(key);
      if (store != null) TAKEN.add(key);
    }
    if (store != null) {
      synchronized (store) { // a catch-up under way ends first (one or two increments)
        return store;
      }
    }
    return null;
  }

  /** How many copies are open, waiting for their partition's task (tests and logs). */
  static int opened() {
    synchronized (OPENED) {
      return OPENED.size();
    }
  }

  /** The checkpoint location as the node names it: a local path for a local file system, without a trailing
   * slash (statestore.partition_key.normalized_checkpoint_dir). */
  static String normalized(org.apache.hadoop.fs.Path dir) {
    String scheme = dir.toUri().getScheme();
    String s = scheme == null || "file".equals(scheme) ? dir.toUri().getPath() : dir.toString();
    while (s.length() > 1 && s.endsWith("/")) s = s.substring(0, s.length() - 1);
    return s;
  }

  private static String key(String storeId, String checkpointDir) {
    return storeId + "\u0000" + checkpointDir;
  }

  private static void run(LocalChannel channel, ProviderSettings settings) {
    long failures = 0;
    while (true) {
      try {
        Thread.sleep(POLL_MS);
        poll(channel, settings);
        failures = 0;
      } catch (InterruptedException e) {
        return;
      } catch (IOException | RuntimeException e) {
        // No node listens yet (it starts with the executor), or it went away: nothing moves here meanwhile.
        if (++failures == 1 || failures % 1000 == 0) {
          LOG.debug("statestore: asking the state node for incoming partitions failed ({} in a row): {}", failures,
              e.toString());
        }
      }
    }
  }

  private static void poll(LocalChannel channel, ProviderSettings settings) throws IOException {
    List<FrameCodec.Incoming> incoming = channel.incoming(settings.materializeTimeoutMs);
    Set<String> wanted = new HashSet<>();
    for (FrameCodec.Incoming e : incoming) wanted.add(key(e.storeId(), e.checkpointDir()));
    List<LocalStore> stale = new ArrayList<>();
    synchronized (OPENED) {
      TAKEN.retainAll(wanted);
      OPENED.entrySet().removeIf(entry -> {
        if (wanted.contains(entry.getKey())) return false;
        stale.add(entry.getValue());
        return true;
      });
    }
    for (LocalStore store : stale) discard(store, "its partition no longer moves here");
    for (FrameCodec.Incoming e : incoming) {
      if (e.version() <= 0) continue; // the node holds no replica of it yet (a warm-up)
      String key = key(e.storeId(), e.checkpointDir());
      LocalStore have;
      synchronized (OPENED) {
        if (TAKEN.contains(key)) continue;
        have = OPENED.get(key);
      }
      if (have != null && have.version() + MAX_BEHIND >= e.version()) {
        if (have.version() >= e.version() || catchUp(have, key, e)) continue;
      }
      LocalStore fresh = open(channel, settings, e);
      if (fresh == null) continue;
      LocalStore replaced;
      boolean late;
      synchronized (OPENED) {
        late = TAKEN.contains(key); // its task loaded the partition meanwhile
        replaced = late ? null : OPENED.put(key, fresh);
      }
      if (late) discard(fresh, "its partition's task loaded it meanwhile");
      if (replaced != null) discard(replaced, "opened anew at version " + fresh.version());
    }
  }

  private static LocalStore open(LocalChannel channel, ProviderSettings settings, FrameCodec.Incoming e)
      throws IOException {
    long start = System.nanoTime();
    File dir = new File(LocalDirs.jvmDir(settings.localDir),
        "ahead_" + e.storeId().replaceAll("[^A-Za-z0-9_.-]", "_") + "_" + java.util.UUID.randomUUID());
    FrameCodec.Materialized answer;
    LocalStore store;
    try {
      answer = channel.materialize(e.storeId(), e.checkpointDir(), e.version(), dir, false,
          settings.materializeTimeoutMs);
      if (!ChannelFrames.written(answer)) {
        LocalDirs.deleteRecursively(dir);
        LOG.debug("statestore: {} not opened ahead of its move: {}", e.storeId(), answer.message());
        return null;
      }
      store = LocalStore.open(dir, e.storeId(), settings);
    } catch (IOException | RuntimeException failed) {
      // Asked again at the next poll (every 200 ms): each failure's hard-linked copy would stay until the JVM ends.
      LocalDirs.deleteRecursively(dir);
      throw failed;
    }
    if (store.version() != answer.version() || store.lineage() == null
        || !java.util.Arrays.equals(store.lineage(), answer.lineage())) {
      discard(store, "it holds version " + store.version() + ", not what the node announced");
      return null;
    }
    LOG.info("statestore: {} opened ahead of its move here, at version {}, in {} ms", e.storeId(), store.version(),
        (System.nanoTime() - start) / 1_000_000);
    return store;
  }

  /**
   * Brings the copy to the node's replica's version with the checkpoint location's increments, while it is still
   * waiting for its partition's load. False when it must be opened anew (an increment does not continue its
   * lineage: the history was rewritten); an increment not in the checkpoint location yet is tried again at the
   * next poll.
   */
  private static boolean catchUp(LocalStore store, String key, FrameCodec.Incoming e) {
    synchronized (store) {
      synchronized (OPENED) {
        if (OPENED.get(key) != store) return true; // its load took it meanwhile
      }
      long from = store.version();
      try {
        CheckpointDir checkpoint = new CheckpointDir(new org.apache.hadoop.fs.Path(e.checkpointDir()),
            hadoopConf != null ? hadoopConf : new org.apache.hadoop.conf.Configuration());
        for (long v = from + 1; v <= e.version(); v++) {
          store.apply(checkpoint.readIncrement(v), checkpoint.incrementPath(v).toString());
        }
        LOG.debug("statestore: copy of {} opened ahead of its move caught up from version {} to {}", e.storeId(),
            from, store.version());
        return true;
      } catch (LocalStore.LineageMismatchException ex) {
        LOG.info("statestore: copy of {} opened ahead of its move cannot be caught up ({}); opened anew",
            e.storeId(), ex.getMessage());
        return false;
      } catch (java.io.IOException | org.rocksdb.RocksDBException | RuntimeException ex) {
        LOG.debug("statestore: copy of {} opened ahead stays at version {} until the next poll ({})", e.storeId(),
            store.version(), ex.toString());
        return true;
      }
    }
  }

  private static void discard(LocalStore store, String why) {
    LOG.info("statestore: copy of {} opened ahead of a move (version {}) closed: {}", store.storeId,
        store.version(), why);
    store.close();
    LocalDirs.deleteRecursively(store.dir);
  }
}
