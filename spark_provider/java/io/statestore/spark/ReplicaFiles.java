package io.statestore.spark;

import java.io.BufferedOutputStream;
import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.zip.CRC32;
import java.util.zip.CheckedInputStream;
import java.util.zip.CheckedOutputStream;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * This host's copies of Spark's RocksDB provider's state files, kept as they become final in the checkpoint
 * location (an SST as its upload writes it, published when it closes; a snapshot zip or changelog copied from its
 * temporary file before it is renamed to its final name, published after), so that a later load reads them from
 * local disk. Each copy has an index entry beside it (the checkpoint path, size and checksum) in a directory every
 * JVM of the host shares, so an executor started after another died serves the dead one's copies. A copy is served
 * only while the checkpoint's file has the size it had when copied, and only if the copy's bytes still have the
 * checksum taken then; otherwise the file is read from the checkpoint location and the log says why. A rewrite of
 * the same name (a re-run batch) replaces the copy.
 */
final class ReplicaFiles {
  private static final Logger LOG = LoggerFactory.getLogger(ReplicaFiles.class);
  /** Hadoop conf key (spark.hadoop.statestore.replicaFiles.dir): the host directory under which copies live. */
  static final String DIR_KEY = "statestore.replicaFiles.dir";
  /** Environment variable naming the host directory when the conf does not: set per host (or container) by whoever
   * starts the workers, where hosts share no temporary directory's meaning. */
  static final String DIR_ENV = "STATESTORE_REPLICA_FILES_DIR";
  private static final String INDEX_SUFFIX = ".index";

  /** A kept copy: its local file, the checkpoint file's size and CRC32 when it was kept, whether a state node kept
   * it from a peer host's shipment (its index entry's line {@code node <id>}) rather than this host's executors, and
   * the checkpoint file's modification time in milliseconds when it was kept (line {@code modified <ms>}; 0 when not
   * known: an SST, whose name no other write reuses, or an entry written before the line existed). */
  record Copy(File file, long size, long crc, boolean shipped, long modified) {}

  private static final String NODE_MARK = "node ";
  private static final String MODIFIED_MARK = "modified ";

  /** This JVM's view of the index: entries it wrote or found on disk and verified. */
  private static final Map<String, Copy> COPIES = new ConcurrentHashMap<>();
  /** How many times this JVM began writing each path: a copy made while a load read the path is kept only if no
   * write began meanwhile. */
  private static final Map<String, Long> WRITES = new ConcurrentHashMap<>();
  private static volatile File dir;

  private ReplicaFiles() {}

  private static File dir(Configuration conf) throws IOException {
    File d = dir;
    if (d == null) {
      synchronized (ReplicaFiles.class) {
        if (dir == null) {
          File shared = hostDir(conf == null ? null : conf.get(DIR_KEY));
          Files.createDirectories(shared.toPath());
          dir = shared;
        }
        d = dir;
      }
    }
    return d;
  }

  /** The host's copies directory: {@code statestore-replica-files} under {@code configured} (the conf), else under
   * {@link #DIR_ENV}, else under the JVM's temporary directory. The host's state node keeps the files peers ship it
   * there too. */
  static File hostDir(String configured) {
    String base = configured != null && !configured.isEmpty() ? configured : System.getenv(DIR_ENV);
    if (base == null || base.isEmpty()) base = System.getProperty("java.io.tmpdir");
    return new File(base, "statestore-replica-files").getAbsoluteFile();
  }

  private static String key(Path path) {
    return path.toUri().getPath();
  }

  /** Where the copy of the state file at checkpoint path {@code key} lives: named by a digest of the whole path
   * (two partitions' {@code 2.zip} differ) and the file's own name, for people reading the directory. */
  private static File copyFile(File dir, String key, StateFilePath file) {
    String digest = UUID.nameUUIDFromBytes(key.getBytes(StandardCharsets.UTF_8)).toString().replace("-", "");
    return new File(dir, digest.substring(0, 16) + "-" + file.name().replace('/', '_'));
  }

  private static File indexFile(File copy) {
    return new File(copy.getPath() + INDEX_SUFFIX);
  }

  /** What runs under the host's lock. */
  interface LockedStep<T> {
    T run() throws IOException;
  }

  /** The lock file every process of the host that replaces a copy and its index entry holds meanwhile: this
   * layer's JVMs and the host's state node (host_copies.py, whose {@code fcntl.lockf} is the same POSIX record lock
   * as {@link FileChannel#lock()}). */
  static final String HOST_LOCK = ".host-copies.lock";

  /** A JVM's threads queue here first: a POSIX lock is per process, and a second {@code lock()} in one JVM throws. */
  private static final Object JVM_LOCK = new Object();

  /** Runs {@code step} holding the host's copies lock in directory {@code dir}. */
  static <T> T underHostLock(File dir, LockedStep<T> step) throws IOException {
    synchronized (JVM_LOCK) {
      try (FileChannel channel = FileChannel.open(new File(dir, HOST_LOCK).toPath(), StandardOpenOption.CREATE,
              StandardOpenOption.WRITE);
           FileLock ignored = channel.lock()) {
        return step.run();
      }
    }
  }

  /** Writes {@code copy}'s index entry (checkpoint path, size, checksum, modification time if known),
   * atomically. */
  private static void writeIndex(String key, Copy copy) throws IOException {
    File index = indexFile(copy.file());
    File staging = new File(index.getParentFile(), "." + index.getName() + "." + UUID.randomUUID() + ".tmp");
    String modified = copy.modified() > 0 ? MODIFIED_MARK + copy.modified() + "\n" : "";
    Files.writeString(staging.toPath(), key + "\n" + copy.size() + "\n" + copy.crc() + "\n" + modified);
    Files.move(staging.toPath(), index.toPath(), StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
  }

  /** The index entry beside {@code copy} if it is of checkpoint path {@code key}, else null. */
  private static Copy readIndex(String key, File copy) {
    try {
      List<String> lines = Files.readAllLines(indexFile(copy).toPath(), StandardCharsets.UTF_8);
      if (lines.size() < 3 || !lines.get(0).equals(key)) return null;
      boolean shipped = false;
      long modified = 0;
      for (String line : lines.subList(3, lines.size())) {
        if (line.startsWith(NODE_MARK)) shipped = true;
        if (line.startsWith(MODIFIED_MARK)) modified = Long.parseLong(line.substring(MODIFIED_MARK.length()));
      }
      return new Copy(copy, Long.parseLong(lines.get(1)), Long.parseLong(lines.get(2)), shipped, modified);
    } catch (IOException | RuntimeException e) {
      return null;
    }
  }

  private static void deleteCopy(File copy) {
    indexFile(copy).delete();
    if (!copy.delete() && copy.exists()) LOG.debug("statestore-fs: the local copy {} could not be deleted", copy);
  }

  /** A copy of state file {@code path} being made, not yet served: published once the checkpoint's file is final
   * (its upload closed, or its rename done), discarded if that fails. */
  static final class Staged {
    private final String key;
    /** The whole checkpoint path, scheme included (the index keys by {@link #key}, its path part). */
    private final String location;
    private final StateFilePath file;
    private final File staging;
    private final File copy;
    private final CRC32 crc = new CRC32();
    /** For a copy made as a load reads the file: the path's write generation when the read began. */
    private final long readAt;
    /** The checkpoint file's modification time (ms) the copy is of, once known (0: not known). */
    private long modified;
    /** For a copy of a temporary file: every byte was copied and the upload closed; the rename publishes it. */
    private volatile boolean complete;

    /** A copy of a write of {@code path} ({@code written}) or of a read of it. */
    private Staged(Path path, StateFilePath file, File dir, boolean written) {
      this.key = key(path);
      this.location = path.toString();
      this.file = file;
      this.copy = copyFile(dir, key, file);
      // Two writers of one name (a re-run batch, a stopped run's late upload) each stage apart.
      this.staging = new File(dir, "." + copy.getName() + "." + UUID.randomUUID() + ".tmp");
      if (written) {
        // The file is being rewritten: an older copy of it is no longer served (an open reader keeps its bytes).
        WRITES.merge(key, 1L, Long::sum);
        COPIES.remove(key);
        deleteCopy(copy);
        readAt = -1;
      } else {
        readAt = WRITES.getOrDefault(key, 0L);
      }
    }

    /** {@link #publish()}, noting that the checkpoint's file is {@code modified} (its modification time in ms, as
     * its file system reports it once final; 0 when not known). */
    void publish(long modified) {
      if (modified > 0) this.modified = modified;
      publish();
    }

    /** Makes the staged copy the one served for its path. A copy made by a read is dropped instead if the path
     * was written since the read began, or has a copy already (this JVM's or another's). */
    void publish() {
      Copy kept;
      try {
        kept = underHostLock(copy.getParentFile(), this::replaceCopyAndIndex);
      } catch (IOException | RuntimeException e) {
        failed(e);
        return;
      }
      if (kept == null) return;
      try {
        FileShipping.kept(key, location, file, kept);
      } catch (RuntimeException e) {
        LOG.warn("statestore-fs: {} {} is kept on this host, but its state node was not told, so no replica gets "
            + "it ({}); a load on another host reads it from the checkpoint location", file.storeId(), file.name(),
            e.toString());
      }
    }

    /** Puts the staged copy and its index entry in place (null: a read's copy dropped, see {@link #publish()}).
     * Held under the host's lock: two writers of one name (a zombie attempt, this host's node keeping a shipment)
     * otherwise could leave one's bytes under the other's index entry. */
    private Copy replaceCopyAndIndex() throws IOException {
      if (readAt >= 0
          && (WRITES.getOrDefault(key, 0L) != readAt || COPIES.containsKey(key) || indexFile(copy).exists())) {
        discard();
        return null;
      }
      Files.move(staging.toPath(), copy.toPath(), StandardCopyOption.REPLACE_EXISTING,
          StandardCopyOption.ATOMIC_MOVE);
      Copy kept = new Copy(copy, copy.length(), crc.getValue(), false, modified);
      try {
        writeIndex(key, kept);
      } catch (IOException | RuntimeException e) {
        Files.deleteIfExists(copy.toPath()); // a copy without its index would be found by nothing, kept for ever
        throw e;
      }
      COPIES.put(key, kept);
      return kept;
    }

    /** Whether a copy published by a rename ({@link #teeingUntilRename}) holds the whole file. */
    boolean isComplete() {
      return complete;
    }

    void markComplete() {
      complete = true;
    }

    /** Drops the staged copy: the path's loads read the checkpoint location. */
    void discard() {
      staging.delete();
    }

    /** The state file this copy is of, for messages. */
    String describe() {
      return file.storeId() + " " + file.name();
    }

    void failed(Exception e) {
      discard();
      LOG.warn("statestore-fs: no local copy of {} {} ({}); its loads read the checkpoint location", file.storeId(),
          file.name(), e.toString());
    }
  }

  /** Stages a copy of the bytes of local file {@code source}, which become state file {@code path} (a rename's
   * source, copied before the rename), or null when {@code path} is no state file or the copy failed (logged). */
  static Staged stage(Path path, StateFilePath file, File source, Configuration conf) {
    if (file == null) return null;
    Staged staged;
    try {
      staged = new Staged(path, file, dir(conf), true);
    } catch (IOException | RuntimeException e) {
      LOG.warn("statestore-fs: no local copy of {} {} ({})", file.storeId(), file.name(), e.toString());
      return null;
    }
    try (InputStream in = new CheckedInputStream(Files.newInputStream(source.toPath()), staged.crc)) {
      Files.copy(in, staged.staging.toPath(), StandardCopyOption.REPLACE_EXISTING);
      return staged;
    } catch (IOException | RuntimeException e) {
      staged.failed(e);
      return null;
    }
  }

  /** {@code upload}, the stream writing state file {@code path}, with every byte also written to a staged copy,
   * published when the upload closes: the copy holds what Spark wrote, whatever later happens to the checkpoint's
   * file. A copy that fails stops being written and is dropped (logged); the upload itself goes on. */
  static OutputStream teeing(OutputStream upload, Path path, StateFilePath file, Configuration conf,
      StatusOf statusOf) {
    if (file == null) return upload;
    TeeStream tee = tee(upload, path, file, conf, false);
    if (tee == null) return upload;
    // Written straight to its final name (an object store's abortable stream): the copy records the file's
    // modification time once uploaded, so that a later write of the same name and size elsewhere (a re-run batch)
    // is told from it; without one, a copy would be trusted on its size alone.
    tee.noteModifiedBy(() -> modified(path, statusOf));
    return tee;
  }

  /** {@link #teeing} for a temporary file of a store without local renames (an object store): the bytes written
   * become state file {@code path} by a later rename, which publishes the staged copy ({@link TeeStream#staged()});
   * closing the upload only marks the copy complete. Null when no copy can be made (logged). */
  static TeeStream teeingUntilRename(OutputStream upload, Path path, StateFilePath file, Configuration conf) {
    return tee(upload, path, file, conf, true);
  }

  private static TeeStream tee(OutputStream upload, Path path, StateFilePath file, Configuration conf,
      boolean untilRename) {
    Staged staged;
    OutputStream copy;
    try {
      staged = new Staged(path, file, dir(conf), true);
      copy = new CheckedOutputStream(new BufferedOutputStream(Files.newOutputStream(staged.staging.toPath())),
          staged.crc);
    } catch (IOException | RuntimeException e) {
      LOG.warn("statestore-fs: no local copy of {} {} ({})", file.storeId(), file.name(), e.toString());
      return null;
    }
    return new TeeStream(upload, copy, staged, untilRename);
  }

  /** The checkpoint deleted {@code path}, a file or (when {@code directory}) a directory with everything under
   * it (Spark's retention, a query's cleanup): the copies of those files go too, whichever JVM of the host kept
   * them. */
  static void forget(Path path, boolean directory, Configuration conf) {
    String gone = key(path);
    String prefix = gone.endsWith("/") ? gone : gone + "/";
    COPIES.entrySet().removeIf(e -> {
      boolean under = e.getKey().equals(gone) || e.getKey().startsWith(prefix);
      if (under) deleteCopy(e.getValue().file());
      return under;
    });
    File d;
    try {
      d = dir(conf);
    } catch (IOException e) {
      return;
    }
    if (!directory) {
      StateFilePath file = StateFilePath.of(path);
      File copy = file == null ? null : copyFile(d, gone, file);
      if (copy != null && readIndex(gone, copy) != null) deleteCopy(copy);
      return;
    }
    File[] entries = d.listFiles((parent, name) -> name.endsWith(INDEX_SUFFIX) && !name.startsWith("."));
    for (File index : entries == null ? new File[0] : entries) {
      File copy = new File(index.getPath().substring(0, index.getPath().length() - INDEX_SUFFIX.length()));
      try {
        String of = Files.readAllLines(index.toPath(), StandardCharsets.UTF_8).get(0);
        if (of.startsWith(prefix)) deleteCopy(copy);
      } catch (IOException | RuntimeException e) {
        // another JVM replaced or removed it meanwhile
      }
    }
  }

  /** The local copy of state file {@code path} whose checkpoint file is {@code size} bytes long and was last
   * modified at {@code modified} (ms), or null when there is none to trust (the reason is logged). A copy another
   * JVM of the host kept is found by its index entry. A copy of a changelog or zip kept with the checkpoint file's
   * modification time is trusted only while the file still has it: a batch re-run on another host rewrites the
   * file under the same name, maybe at the same size, and this host's copy is then of the older bytes. Its
   * checksum is verified as it is read ({@link VerifyingStream}). */
  static Copy trusted(Path path, StateFilePath file, long size, long modified, Configuration conf) {
    if (file == null) return null;
    String key = key(path);
    Copy cached = COPIES.get(key);
    if (cached != null && doubt(cached, size, modified) == null) return cached;
    // Not cached, or the cached entry is in doubt: the index on disk may be newer (a node kept a later write's
    // copy from a peer host's shipment, or another JVM of the host a copy of its own).
    Copy copy;
    try {
      copy = readIndex(key, copyFile(dir(conf), key, file));
    } catch (IOException e) {
      copy = null;
    }
    if (copy == null && cached == null) return null;
    String doubt = copy == null ? "its index entry is gone" : doubt(copy, size, modified);
    if (doubt == null) {
      COPIES.put(key, copy);
      return copy;
    }
    COPIES.remove(key);
    // A copy of an earlier write of the name can never be served again: removed, so that this load's read of the
    // checkpoint location keeps a copy of the file as it is now.
    boolean stale = copy != null && copy.modified() > 0 && copy.modified() < modified;
    if (stale) deleteCopy(copy.file());
    LOG.info("statestore-fs: the local copy of {} {} is not used, {}; read from the checkpoint location{}",
        file.storeId(), file.name(), doubt, stale ? " (the stale copy is removed)" : "");
    return null;
  }

  /** {@link #trusted}, and when this host holds no copy to trust, the same after this executor's state node fetched
   * the partition's files from a peer holding them ({@link FileShipping#fetchFromPeers}): a fetched copy is trusted
   * by the same rules, so one in doubt is still read from the checkpoint location. */
  private static Copy trustedOrFetched(Path path, StateFilePath file, long size, long modified, Configuration conf) {
    Copy copy = trusted(path, file, size, modified, conf);
    if (copy != null || !FileShipping.fetchFromPeers(file)) return copy;
    return trusted(path, file, size, modified, conf);
  }

  /** Why {@code copy} is not to be served for a checkpoint file of {@code size} bytes last modified at
   * {@code modified} (ms; 0 when not known), or null when it is. */
  private static String doubt(Copy copy, long size, long modified) {
    if (copy.size() != size) return "its size " + copy.size() + " differs from the checkpoint's " + size;
    if (copy.file().length() != size) return "the copy's file is " + copy.file().length() + " bytes, not " + size;
    if (copy.modified() > 0 && modified > 0 && copy.modified() != modified) {
      return "the checkpoint's file was written again since (modified at " + modified + " ms, the copy is of the "
          + "write at " + copy.modified() + " ms)";
    }
    return null;
  }

  /** A served copy of {@code path} turned out corrupt: the local disk is in doubt, so every copy of that
   * partition's files is removed, and the load's retry reads them all from the checkpoint location. */
  static void dropCorrupt(Path path, StateFilePath file, Copy copy, String why) {
    COPIES.remove(key(path), copy);
    deleteCopy(copy.file());
    String whole = key(path);
    Path partition = new Path(path.toUri().getScheme(), path.toUri().getAuthority(),
        whole.substring(0, whole.length() - file.name().length() - 1));
    forget(partition, true, null);
    LOG.warn("statestore-fs: the local copy of {} {} is corrupt ({}); every copy of that partition's files is "
        + "removed and the load fails, so that its retry reads the checkpoint location", file.storeId(), file.name(),
        why);
  }

  /** Opens state file {@code path} (null when it is none) from its trusted copy if there is one, through
   * {@code opener}, else from the checkpoint location, keeping a copy of what the load reads there when it reads
   * the whole file in order (a file written before the layer was on, or by another host); either way the read is
   * counted. */
  static FSDataInputStream open(Path path, StateFilePath file, StatusOf statusOf, Opener opener, Configuration conf)
      throws IOException {
    if (file == null) return opener.open(path, false);
    FileStatus status = statusOf.status(path);
    long size = status.getLen();
    Copy copy = trustedOrFetched(path, file, size, status.getModificationTime(), conf);
    if (copy != null) {
      FSDataInputStream served = null;
      try {
        served = opener.open(new Path(copy.file().toURI()), true);
      } catch (FileNotFoundException e) {
        // Deleted since it was found trusted (a retired replica's copies, retention, a rewrite): the checkpoint
        // location still has the file.
        LOG.info("statestore-fs: the copy of {} {} went away as it was opened; read from the checkpoint location",
            file.storeId(), file.name());
      }
      if (served != null) {
        return CheckpointReads.counted(new FSDataInputStream(new VerifyingStream(served, path, file, copy)), file,
            copy.shipped() ? FrameCodec.SOURCE_REPLICA : FrameCodec.SOURCE_LOCAL);
      }
    }
    FSDataInputStream in = opener.open(path, false);
    try {
      Staged staged = new Staged(path, file, dir(conf), false);
      staged.modified = status.getModificationTime();
      OutputStream out = new CheckedOutputStream(
          new BufferedOutputStream(Files.newOutputStream(staged.staging.toPath())), staged.crc);
      in = new FSDataInputStream(new ReadThroughStream(in, out, staged, size));
    } catch (IOException | RuntimeException e) {
      LOG.debug("statestore-fs: no copy of {} {} as it is read ({})", file.storeId(), file.name(), e.toString());
    }
    return CheckpointReads.counted(in, file);
  }

  /** Serves state file {@code path} (of {@code status} in the checkpoint) to {@code target}, a local file a load
   * copies it to (Spark's file manager copies each SST into RocksDB's working directory), as a hard link to its
   * trusted copy: the load then writes nothing. The linked bytes are checked against the checksum taken when the
   * copy was kept before this returns (the link, not the copy's name, is what RocksDB opens; copies are replaced
   * by rename and never written in place, so the two stay one file). Returns false when the caller must copy as
   * usual: no trusted copy, or no link possible (another file system; logged once); a copy whose bytes differ is
   * dropped with its partition's other copies, so the caller's copy reads the checkpoint location. */
  static boolean link(Path path, StateFilePath file, FileStatus status, File target, Configuration conf)
      throws IOException {
    Copy copy = trustedOrFetched(path, file, status.getLen(), status.getModificationTime(), conf);
    if (copy == null || linksRefused) return false;
    Files.deleteIfExists(target.toPath());
    try {
      Files.createLink(target.toPath(), copy.file().toPath());
    } catch (java.nio.file.NoSuchFileException | java.nio.file.FileAlreadyExistsException e) {
      // The copy went away since it was found trusted, or another thread linked the target meanwhile: this file
      // is copied as usual; links as such still work.
      LOG.debug("statestore-fs: {} {} not linked ({}); copied instead", file.storeId(), file.name(), e.toString());
      return false;
    } catch (IOException | UnsupportedOperationException e) {
      if (!linksRefused) {
        linksRefused = true;
        LOG.info("statestore-fs: copies are not hard-linked into {} ({}); loads copy them instead",
            target.getParent(), e.toString());
      }
      return false;
    }
    CRC32 crc = new CRC32();
    long length;
    try (InputStream in = new CheckedInputStream(Files.newInputStream(target.toPath()), crc)) {
      length = in.transferTo(OutputStream.nullOutputStream());
    } catch (IOException e) {
      Files.deleteIfExists(target.toPath());
      throw e;
    }
    String why = length != copy.size() ? "it has " + length + " bytes, " + copy.size() + " were kept"
        : crc.getValue() != copy.crc() ? "its checksum differs from the one taken when it was kept" : null;
    if (why != null) {
      Files.deleteIfExists(target.toPath());
      dropCorrupt(path, file, copy, why);
      return false;
    }
    CheckpointReads.record(file, length, copy.shipped() ? FrameCodec.SOURCE_REPLICA : FrameCodec.SOURCE_LOCAL,
        ", as a hard link");
    return true;
  }

  /** Calls made by a layer into the file system it wraps, on this thread (see {@link #beneath}). */
  private static final ThreadLocal<int[]> BENEATH = ThreadLocal.withInitial(() -> new int[1]);

  /** A call of a file system's own operation. */
  interface IoCall<T> {
    T call() throws IOException;
  }

  /** Runs {@code call}, an operation a layer ({@link ReplicaFilterFileSystem}) passes to the file system it wraps:
   * a layer reached by it (the {@code file:} layer under a {@code viewfs:} mount of local directories) passes every
   * path through, so that each state file is copied, served and counted once, by the outer layer. */
  static <T> T beneath(IoCall<T> call) throws IOException {
    int[] depth = BENEATH.get();
    depth[0]++;
    try {
      return call.call();
    } finally {
      depth[0]--;
    }
  }

  /** Whether this thread is inside {@link #beneath}. */
  static boolean isBeneathALayer() {
    return BENEATH.get()[0] > 0;
  }

  /** Set once a hard link from the copies directory failed: every later load copies. */
  private static volatile boolean linksRefused;

  /** A file system's own open, of a checkpoint path or (when {@code copy}) of a copy's local path. */
  interface Opener {
    FSDataInputStream open(Path path, boolean copy) throws IOException;
  }

  /** The modification time (ms) of the file at {@code path} as {@code statusOf} reports it, or 0 when it cannot be
   * read (the copy is then served on size and checksum alone, as before this was kept). */
  static long modified(Path path, StatusOf statusOf) {
    try {
      return statusOf.status(path).getModificationTime();
    } catch (IOException | RuntimeException e) {
      return 0;
    }
  }

  /** A file system's own status of the file at a checkpoint path. */
  interface StatusOf {
    FileStatus status(Path path) throws IOException;
  }
}
