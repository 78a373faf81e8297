package io.statestore.spark;

import java.io.File;
import java.io.IOException;
import java.util.Arrays;
import org.rocksdb.RocksDBException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Where a load's state comes from, decided in one place (DESIGN.md section 4, "Materializing a replica"). For
 * version {@code v} of a store partition, the first source that is certain wins:
 * <ol>
 *   <li><b>local</b>: this provider's own directory, at {@code v} or below on the history the checkpoint
 *       location holds, caught up with the increments it lacks;</li>
 *   <li><b>replica</b>, opened ahead: a planned hand-over moves the partition here, and this executor opened a
 *       copy of its node's replica before the batch ({@link PreparedStores}); caught up as below;</li>
 *   <li><b>replica</b> or <b>peer</b>: the state node of this executor writes a RocksDB checkpoint of its copy
 *       of the partition (its replica: hard links; or one fetched from a peer node) at some {@code w <= v}
 *       into this provider's directory; used only when its lineage at {@code w} is the checkpoint location's
 *       (formats.md 3.4), then caught up with increments {@code w+1..v};</li>
 *   <li><b>checkpoint</b>: restored from the checkpoint location (snapshot plus increments).</li>
 * </ol>
 * A source in doubt is never used: the next one is tried, and the log says why. The node never makes a load
 * fail; only the checkpoint location's own errors do.
 *
 * <p>Partial-state merge (DESIGN.md section 4; setting {@code partialMerge}): when the node's copy lacks only the
 * last increment {@code v} (a hand-over: the previous primary's last increment is still on its way), the copy is
 * handed out at {@code v-1} at once, with a {@link PendingIncrement} reading and applying {@code v} in the
 * background while the batch writes into an overlay ({@link PartialMerge}). Its lineage is checked once applied;
 * a failure there fails the task, and the retried load of that version applies the increment first.
 */
final class StateLoader {
  private static final Logger LOG = LoggerFactory.getLogger(StateLoader.class);

  /** Where a load's state came from. */
  enum Source {
    LOCAL(FrameCodec.SOURCE_LOCAL), REPLICA(FrameCodec.SOURCE_REPLICA), PEER(FrameCodec.SOURCE_PEER),
    CHECKPOINT(FrameCodec.SOURCE_CHECKPOINT);

    final int code;

    Source(int code) {
      this.code = code;
    }

    static Source ofCode(int code) {
      for (Source s : values()) if (s.code == code) return s;
      return REPLICA;
    }

    String label() {
      return name().toLowerCase(java.util.Locale.ROOT);
    }
  }

  /** A load's outcome: the store at the version asked for, where it came from, from which version it was
   * caught up, how many increments that took, how long the whole load took, and why earlier sources were
   * passed over (empty when the first one served). With partial merge, {@code pending} is the last increment,
   * still being applied in the background (the store is at the version before it), else null. {@code openedAhead}:
   * the replica's copy was opened before the batch, when the move was planned ({@link PreparedStores}). */
  record Loaded(LocalStore store, Source source, long fromVersion, long versionsApplied, long millis,
      long latestInCheckpoint, String passedOver, PendingIncrement pending, boolean openedAhead) {}

  private final String storeId;
  private final int partitionId;
  private final CheckpointDir checkpoint;
  private final ProviderSettings settings;
  private final LocalChannel channel;
  /** The last partial-state merge this loader started: if it failed, the next load of its version does not try
   * one again. */
  private PendingIncrement lastPartial;

  StateLoader(String storeId, int partitionId, CheckpointDir checkpoint, ProviderSettings settings,
      LocalChannel channel) {
    this.storeId = storeId;
    this.partitionId = partitionId;
    this.checkpoint = checkpoint;
    this.settings = settings;
    this.channel = channel;
  }

  /**
   * Brings the partition to {@code version}. {@code current} is this provider's open store ({@code trusted}
   * false: an abort or failed commit left it in doubt), {@code dir} its directory; {@code wanted} the lineage
   * Spark asks for (checkpoint format v2), else null. {@code closeCurrent} closes {@code current} when another
   * source replaces it.
   */
  Loaded load(LocalStore current, boolean trusted, File dir, long version, byte[] wanted, Runnable closeCurrent)
      throws IOException, RocksDBException {
    long start = System.nanoTime();
    CheckpointDir.Listing listing = checkpoint.list();
    Target target = new Target(version, wanted);
    StringBuilder passed = new StringBuilder();

    if (current != null) {
      long held = current.version();
      String why = trusted ? catchUpOwn(current, version, target, listing) : "an aborted batch left it in doubt";
      if (why == null) {
        return new Loaded(current, Source.LOCAL, held, version - held, elapsedMs(start), listing.latest(), "", null,
            false);
      }
      passed.append("own directory: ").append(why);
    }
    closeCurrent.run();
    LocalDirs.deleteRecursively(dir);

    if (channel != null && version > 0) {
      NodeCopy prepared = fromPrepared(version, target, listing);
      if (prepared != null && prepared.store != null) {
        return new Loaded(prepared.store, prepared.source, prepared.from, version - prepared.from, elapsedMs(start),
            listing.latest(), passed.toString(), prepared.pending, true);
      }
      if (prepared != null) note(passed, prepared.why);
      NodeCopy copy = fromNode(dir, version, target, listing);
      if (copy.store != null) {
        return new Loaded(copy.store, copy.source, copy.from, version - copy.from, elapsedMs(start), listing.latest(),
            note(passed, copy.why), copy.pending, false);
      }
      note(passed, copy.why);
      LocalDirs.deleteRecursively(dir);
    }
    Restored from = restore(dir, version, listing);
    LocalStore restored = from.store();
    long base = from.base();
    if (wanted != null) { // checkpoint format v2: Spark's commit log names the history it wants
      String mismatch = target.mismatch(restored, "the store restored from the checkpoint location");
      if (mismatch != null) {
        restored.close();
        throw new IOException("statestore: " + mismatch + " (Spark's commit log names another history of version "
            + version + " than the checkpoint location " + checkpoint.dir + " holds)");
      }
    }
    return new Loaded(restored, Source.CHECKPOINT, base, version - base, elapsedMs(start), listing.latest(),
        passed.toString(), null, false);
  }

  /**
   * Brings this provider's own store to {@code version} with the checkpoint location's increments; returns null
   * when it is there on the right history, else why it cannot serve (the caller then discards it).
   */
  private String catchUpOwn(LocalStore own, long version, Target target, CheckpointDir.Listing listing)
      throws RocksDBException {
    long held = own.version();
    if (held > version) return "it holds version " + held + ", past " + version + " (Spark re-runs a batch)";
    if (held < version && listing.increments().subSet(held + 1, true, version, true).size() != version - held) {
      return "increments " + (held + 1) + ".." + version + " are not all in the checkpoint location";
    }
    try {
      for (long v = held + 1; v <= version; v++) {
        own.apply(checkpoint.readIncrement(v), checkpoint.incrementPath(v).toString());
      }
      if (own.lineage() == null) {
        // Written before lineages existed: trusted as this JVM's own cache, as before (never for replicas).
        return null;
      }
      return target.mismatch(own, "its version " + version);
    } catch (IOException e) {
      return e.getMessage();
    }
  }

  /** What the node offered: a store on the right history at the version asked for (or at the version before,
   * with its last increment {@code pending}), or why there is none. */
  private record NodeCopy(LocalStore store, Source source, long from, String why, PendingIncrement pending) {}

  private NodeCopy fromNode(File dir, long version, Target target, CheckpointDir.Listing listing) {
    // A directory of its own for the node to write into: if this load gives up waiting, a late answer lands
    // there, never in the directory the checkpoint location is then restored into.
    File staging = new File(dir.getParentFile(), dir.getName() + ".from-node-" + java.util.UUID.randomUUID());
    FrameCodec.Materialized answer;
    try {
      answer = channel.materialize(storeId, checkpoint.dir.toString(), version, staging, allowPeer(),
          settings.materializeTimeoutMs);
    } catch (IOException e) {
      LocalDirs.deleteRecursively(staging);
      return new NodeCopy(null, null, 0, "state node: " + e.getMessage(), null);
    }
    if (!ChannelFrames.written(answer)) {
      LocalDirs.deleteRecursively(staging);
      return new NodeCopy(null, null, 0, "state node: " + answer.message(), null);
    }
    Source source = Source.ofCode(answer.source());
    String label = source.label() + " at version " + answer.version();
    LocalStore store = null;
    try {
      java.nio.file.Files.move(staging.toPath(), dir.toPath(), java.nio.file.StandardCopyOption.ATOMIC_MOVE);
      store = LocalStore.open(dir, storeId, settings);
      if (store.version() != answer.version() || !Arrays.equals(store.lineage(), answer.lineage())) {
        throw new IOException("the checkpoint the node wrote holds version " + store.version() + ", lineage "
            + IncrementCodec.hex(store.lineage()) + ", not what the node announced");
      }
      return caughtUp(store, source, label, version, target, listing);
    } catch (IOException | RocksDBException | RuntimeException e) {
      if (store != null) store.close();
      LocalDirs.deleteRecursively(staging);
      return new NodeCopy(null, null, 0, label + " not used: " + e.getMessage(), null);
    }
  }

  /**
   * A copy of the partition at some version up to {@code version} (the node's, or one opened ahead of the move),
   * checked against the checkpoint location's lineage and brought to {@code version} (or handed out at the
   * version before, with its last increment pending, for a partial-state merge). Throws when it is in doubt.
   */
  private NodeCopy caughtUp(LocalStore store, Source source, String label, long version, Target target,
      CheckpointDir.Listing listing) throws IOException, RocksDBException {
    long from = store.version();
    if (store.lineage() == null) throw new IOException("its lineage is not known");
    String mismatch = lineageAgainstCheckpoint(store, version, target, listing);
    if (mismatch != null) throw new IOException(mismatch);
    if (partialMergeFits(store, version, listing)) {
      PendingIncrement pending = new PendingIncrement(store, version, checkpoint.incrementPath(version).toString(),
          () -> lastIncrement(version),
          () -> Faults.at(settings.faultsFile, "last-increment-apply", partitionId, storeId),
          s -> target.mismatch(s, label + " caught up to " + version));
      lastPartial = pending;
      pending.start();
      return new NodeCopy(store, source, from, null, pending);
    }
    for (long v = store.version() + 1; v <= version; v++) {
      Increment inc = v == version ? lastIncrement(v) : checkpoint.readIncrement(v);
      store.apply(inc, checkpoint.incrementPath(v).toString());
    }
    mismatch = target.mismatch(store, label + " caught up to " + version);
    if (mismatch != null) throw new IOException(mismatch);
    return new NodeCopy(store, source, from, null, null);
  }

  /** The copy of the node's replica this executor opened ahead of a planned move ({@link PreparedStores}), if
   * there is one and it is on the right history; it is discarded otherwise. */
  private NodeCopy fromPrepared(long version, Target target, CheckpointDir.Listing listing) {
    LocalStore store = PreparedStores.take(storeId, checkpoint.dir);
    if (store == null) return null;
    String label = "the replica opened ahead of the move at version " + store.version();
    try {
      return caughtUp(store, Source.REPLICA, label, version, target, listing);
    } catch (IOException | RocksDBException | RuntimeException e) {
      store.close();
      LocalDirs.deleteRecursively(store.dir);
      return new NodeCopy(null, null, 0, label + " not used: " + e.getMessage(), null);
    }
  }

  /** Whether the copy (on the right history at its version) lacks only increment {@code version}, which the
   * checkpoint location holds, and the setting allows the batch to start before it is applied. Not after a
   * partial-state merge of the same version failed: the retried load applies the increment first, and so falls
   * back to the next source if the copy is in doubt. */
  private boolean partialMergeFits(LocalStore store, long version, CheckpointDir.Listing listing) {
    if (!settings.partialMerge || store.version() != version - 1 || !listing.increments().contains(version)) {
      return false;
    }
    PendingIncrement last = lastPartial;
    if (last != null && last.version == version && last.failedAlready()) {
      LOG.info("statestore: {} version {}: no partial merge this time, the last one failed", storeId, version);
      return false;
    }
    return true;
  }

  /** Reads the last increment a copy of the node lacks (fault point {@code last-increment}: tests delay it). */
  private Increment lastIncrement(long version) throws IOException {
    Faults.at(settings.faultsFile, "last-increment", partitionId, storeId);
    return checkpoint.readIncrement(version);
  }

  /** Null when the store's lineage at its version is the checkpoint location's, else why not. */
  private String lineageAgainstCheckpoint(LocalStore store, long version, Target target,
      CheckpointDir.Listing listing) throws IOException {
    long w = store.version();
    if (w == version) return target.mismatch(store, "its version " + w);
    if (w > version) return "it holds version " + w + ", past " + version;
    if (w == 0) return Arrays.equals(store.lineage(), IncrementCodec.EMPTY_LINEAGE) ? null : "bad lineage at 0";
    if (!listing.increments().contains(w)) {
      return "increment " + w + " is no longer in the checkpoint location to check its lineage";
    }
    IncrementCodec.Header header = checkpoint.readHeader(w, storeId);
    if (header == null || header.lineage() == null) return "the lineage of version " + w + " is not known";
    if (!Arrays.equals(header.lineage(), store.lineage())) {
      return "its version " + w + " has lineage " + IncrementCodec.hex(store.lineage()) + ", the checkpoint location's "
          + IncrementCodec.hex(header.lineage()) + " (another history: a batch Spark re-ran)";
    }
    return null;
  }

  private boolean allowPeer() {
    return switch (settings.peerFetch) {
      case "always" -> true;
      case "never" -> false;
      default -> !"file".equals(checkpoint.dir.toUri().getScheme()); // auto: a remote checkpoint location
    };
  }

  /**
   * Restores {@code version} from the checkpoint location: the newest usable snapshot at or below it (or the empty
   * store), then the increments above it. A snapshot is passed over, with a warning saying why, and the next older
   * one tried, when it cannot be read whole, is of another store or version, or has another lineage than the
   * increment of its version: the late upload of a background snapshot of a history a re-run batch abandoned
   * (the increments are the record; a snapshot is only a shortcut). The increments' own errors fail the load.
   */
  private Restored restore(File dir, long version, CheckpointDir.Listing listing)
      throws IOException, RocksDBException {
    LocalStore store = null;
    for (Long s = listing.snapshots().floor(version); s != null && store == null; s = listing.snapshots().lower(s)) {
      try {
        store = openSnapshot(dir, s, listing);
      } catch (IOException | RocksDBException | RuntimeException e) {
        LOG.warn("statestore: {} snapshot {} ({}) passed over to restore version {}: {}", storeId, s,
            checkpoint.snapshotPath(s), version, e.getMessage());
        LocalDirs.deleteRecursively(dir);
      }
    }
    if (store == null) store = LocalStore.open(dir, storeId, settings);
    long base = store.version();
    try {
      for (long v = base + 1; v <= version; v++) {
        store.apply(checkpoint.readIncrement(v), checkpoint.incrementPath(v).toString());
      }
      return new Restored(store, base);
    } catch (IOException | RocksDBException | RuntimeException e) {
      store.close();
      throw e;
    }
  }

  /**
   * Replays {@code version} from snapshot {@code snapshot} of the checkpoint location and the increments above it
   * (Spark's {@code replayStateFromSnapshot}: the state data source's {@code snapshotStartBatchId}), whatever newer
   * snapshots or copies exist: a user replays from an older snapshot when a newer one is in doubt. The snapshot
   * must be in the checkpoint location; an error names it and the snapshots there are.
   */
  Loaded replayFromSnapshot(File dir, long snapshot, long version, byte[] wanted)
      throws IOException, RocksDBException {
    long start = System.nanoTime();
    CheckpointDir.Listing listing = checkpoint.list();
    if (!listing.snapshots().contains(snapshot)) {
      throw new IOException("statestore: no snapshot of version " + snapshot + " (batch " + (snapshot - 1) + ") of "
          + storeId + " in " + checkpoint.dir + " to replay from; its snapshots are at versions "
          + listing.snapshots());
    }
    LocalStore store = openSnapshot(dir, snapshot, listing);
    try {
      for (long v = snapshot + 1; v <= version; v++) {
        store.apply(checkpoint.readIncrement(v), checkpoint.incrementPath(v).toString());
      }
      String mismatch = new Target(version, wanted).mismatch(store, "version " + version + " replayed from snapshot "
          + snapshot);
      if (mismatch != null) throw new IOException("statestore: " + mismatch);
    } catch (IOException | RocksDBException | RuntimeException e) {
      store.close();
      throw e;
    }
    return new Loaded(store, Source.CHECKPOINT, snapshot, version - snapshot, elapsedMs(start), listing.latest(), "",
        null, false);
  }

  /** A store restored from the checkpoint location, and the version it started from (its snapshot's, or 0). */
  private record Restored(LocalStore store, long base) {}

  /** Snapshot {@code snapshot} opened in {@code dir}, checked whole and on the checkpoint location's history. */
  private LocalStore openSnapshot(File dir, long snapshot, CheckpointDir.Listing listing)
      throws IOException, RocksDBException {
    SnapshotManifest m = checkpoint.downloadSnapshot(snapshot, dir);
    if (!storeId.equals(m.storeId)) throw new IOException("it belongs to store '" + m.storeId + "'");
    LocalStore store = LocalStore.open(dir, storeId, settings);
    try {
      if (store.version() != snapshot) throw new IOException("its database holds version " + store.version());
      if (store.lineage() != null && listing.increments().contains(snapshot)) {
        IncrementCodec.Header header = checkpoint.readHeader(snapshot, storeId);
        if (header != null && header.lineage() != null && !Arrays.equals(header.lineage(), store.lineage())) {
          throw new IOException("it has lineage " + IncrementCodec.hex(store.lineage()) + ", increment " + snapshot
              + " has " + IncrementCodec.hex(header.lineage()) + " (a snapshot of a history a re-run batch "
              + "abandoned)");
        }
      }
      return store;
    } catch (IOException | RuntimeException e) {
      store.close();
      throw e;
    }
  }

  /** The lineage version {@code version} must have: Spark's (format v2) if given, else the checkpoint
   * location's, read from the increment's header on first use. */
  private final class Target {
    private final long version;
    private final byte[] wanted;
    private byte[] fromCheckpoint;
    private boolean read;

    Target(long version, byte[] wanted) {
      this.version = version;
      this.wanted = wanted;
    }

    byte[] lineage() throws IOException {
      if (wanted != null) return wanted;
      if (version == 0) return IncrementCodec.EMPTY_LINEAGE;
      if (!read) {
        IncrementCodec.Header header = checkpoint.readHeader(version, storeId);
        fromCheckpoint = header == null ? null : header.lineage();
        read = true;
      }
      return fromCheckpoint;
    }

    /** Null when {@code store} (at {@link #version}) has this lineage, else why not. */
    String mismatch(LocalStore store, String what) throws IOException {
      byte[] expected = lineage();
      if (expected == null) return what + ": the checkpoint location does not say its lineage";
      if (store.lineage() == null) return what + ": its lineage is not known";
      if (!Arrays.equals(expected, store.lineage())) {
        return what + " has lineage " + IncrementCodec.hex(store.lineage()) + ", "
            + (wanted != null ? "Spark asks for " : "the checkpoint location holds ") + IncrementCodec.hex(expected)
            + " (another history: a batch Spark re-ran)";
      }
      return null;
    }
  }

  private static String note(StringBuilder passed, String why) {
    if (why == null) return passed.toString();
    if (passed.length() > 0) passed.append("; ");
    passed.append(why);
    return passed.toString();
  }

  private static long elapsedMs(long start) {
    return (System.nanoTime() - start) / 1_000_000;
  }
}
