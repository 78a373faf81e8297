package io.statestore.spark;

import java.io.File;
import java.io.FileInputStream;
import java.io.FileNotFoundException;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.URI;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.zip.CRC32;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/** A store partition's checkpoint location (formats.md section 5), through Hadoop's FileSystem API. */
final class CheckpointDir {
  private static final Map<URI, FileSystem> FILE_SYSTEMS = new ConcurrentHashMap<>();
  private static final String INCREMENT = ".increment";
  private static final String SNAPSHOT = ".snapshot";
  private static final String MANIFEST = "MANIFEST.json";

  /** What the directory holds: increment versions and complete snapshot versions. */
  record Listing(TreeSet<Long> increments, TreeSet<Long> snapshots) {
    long latest() {
      long l = increments.isEmpty() ? 0 : increments.last();
      return Math.max(l, snapshots.isEmpty() ? 0 : snapshots.last());
    }
  }

  final Path dir;
  private final FileSystem fs;
  /** Set for a location on the local file system: its files are created without Hadoop (it forks a chmod each). */
  private final LocalCheckpointWrites localWrites;

  CheckpointDir(Path dir, Configuration conf) throws IOException {
    this.dir = dir;
    this.fs = fileSystem(dir, conf);
    this.localWrites = LocalCheckpointWrites.forFileSystem(fs, conf);
  }

  /** A private FileSystem instance without Hadoop's .crc side files: our files carry their own CRC. */
  private static FileSystem fileSystem(Path dir, Configuration conf) throws IOException {
    URI uri = dir.getFileSystem(conf).getUri();
    FileSystem fs = FILE_SYSTEMS.get(uri);
    if (fs == null) {
      fs = FileSystem.newInstance(uri, conf);
      fs.setWriteChecksum(false);
      fs.setVerifyChecksum(false);
      FileSystem prev = FILE_SYSTEMS.putIfAbsent(uri, fs);
      if (prev != null) {
        fs.close();
        fs = prev;
      }
    }
    return fs;
  }

  Path incrementPath(long version) {
    return new Path(dir, version + INCREMENT);
  }

  Path snapshotPath(long version) {
    return new Path(dir, version + SNAPSHOT);
  }

  /** Writes {@code bytes} to {@code target} atomically: a temporary file in the same directory, renamed. */
  void writeAtomically(Path target, byte[] bytes) throws IOException {
    if (localWrites != null) {
      localWrites.writeAtomically(localWrites.file(target), bytes);
      return;
    }
    Path tmp = new Path(target.getParent(), "." + target.getName() + "." + UUID.randomUUID() + ".tmp");
    try (FSDataOutputStream out = fs.create(tmp, true)) {
      out.write(bytes);
      out.hsync();
    }
    if (!fs.rename(tmp, target)) {
      // Hadoop's rename does not replace: a re-run batch rewrites its version.
      fs.delete(target, false);
      if (!fs.rename(tmp, target)) {
        fs.delete(tmp, false);
        throw new IOException("Cannot rename " + tmp + " to " + target);
      }
    }
  }

  void writeIncrement(long version, byte[] bytes) throws IOException {
    writeAtomically(incrementPath(version), bytes);
  }

  /** Reads and verifies increment {@code version}; a missing or corrupt file is an error naming it. */
  Increment readIncrement(long version) throws IOException {
    Path p = incrementPath(version);
    byte[] data;
    try {
      data = readAll(p);
    } catch (FileNotFoundException e) {
      throw new IOException("Missing increment " + p + " (needed to restore store version " + version + ")", e);
    }
    Increment inc = IncrementCodec.decode(data, p.toString());
    if (inc.version != version) {
      throw new IOException("Corrupt increment " + p + ": holds version " + inc.version);
    }
    return inc;
  }

  /**
   * The header of increment {@code version} (store, version, lineages) from its first bytes: one short read,
   * not a verification of the file. Null when the file is missing.
   */
  IncrementCodec.Header readHeader(long version, String storeId) throws IOException {
    Path p = incrementPath(version);
    byte[] prefix = new byte[64 + storeId.getBytes(java.nio.charset.StandardCharsets.UTF_8).length];
    int off = 0;
    try (InputStream in = fs.open(p)) {
      while (off < prefix.length) {
        int n = in.read(prefix, off, prefix.length - off);
        if (n < 0) break;
        off += n;
      }
    } catch (FileNotFoundException e) {
      return null;
    }
    return IncrementCodec.readHeader(java.util.Arrays.copyOf(prefix, off), p.toString());
  }

  private byte[] readAll(Path p) throws IOException {
    FileStatus st = fs.getFileStatus(p);
    if (st.getLen() > Integer.MAX_VALUE) throw new IOException("File too large: " + p);
    byte[] data = new byte[(int) st.getLen()];
    try (InputStream in = fs.open(p)) {
      int off = 0;
      while (off < data.length) {
        int n = in.read(data, off, data.length - off);
        if (n < 0) throw new IOException("Truncated read of " + p);
        off += n;
      }
    }
    return data;
  }

  Listing list() throws IOException {
    TreeSet<Long> incs = new TreeSet<>();
    TreeSet<Long> snaps = new TreeSet<>();
    FileStatus[] statuses;
    try {
      statuses = fs.listStatus(dir);
    } catch (FileNotFoundException e) {
      return new Listing(incs, snaps);
    }
    for (FileStatus st : statuses) {
      String name = st.getPath().getName();
      if (name.startsWith(".")) continue;
      Long v = parseVersion(name, INCREMENT);
      if (v != null && st.isFile()) incs.add(v);
      v = parseVersion(name, SNAPSHOT);
      if (v != null && st.isDirectory() && fs.exists(new Path(st.getPath(), MANIFEST))) snaps.add(v);
    }
    return new Listing(incs, snaps);
  }

  private static Long parseVersion(String name, String suffix) {
    if (!name.endsWith(suffix)) return null;
    try {
      return Long.parseLong(name.substring(0, name.length() - suffix.length()));
    } catch (NumberFormatException e) {
      return null;
    }
  }

  /** Uploads a local RocksDB checkpoint as snapshot {@code version}, MANIFEST.json last. */
  void uploadSnapshot(long version, String storeId, File local, byte[] lineage) throws IOException {
    Path target = snapshotPath(version);
    if (localWrites != null) {
      localWrites.mkdirs(localWrites.file(target));
    } else {
      fs.mkdirs(target);
    }
    List<SnapshotManifest.FileEntry> entries = new ArrayList<>();
    File[] files = local.listFiles();
    if (files == null) throw new IOException("No local checkpoint at " + local);
    byte[] buf = new byte[1 << 20];
    for (File f : files) {
      // RocksDB's OPTIONS file records the options the store was opened with; every open writes a new one, and a
      // restore opens with the provider's own: about 12 KB, half a small partition's snapshot (formats.md 4).
      if (!f.isFile() || f.getName().startsWith("OPTIONS-")) continue;
      CRC32 crc = new CRC32();
      try (InputStream in = new FileInputStream(f);
           OutputStream out = create(new Path(target, f.getName()))) {
        int n;
        while ((n = in.read(buf)) > 0) {
          crc.update(buf, 0, n);
          out.write(buf, 0, n);
        }
      }
      entries.add(new SnapshotManifest.FileEntry(f.getName(), f.length(), crc.getValue()));
    }
    writeAtomically(new Path(target, MANIFEST), new SnapshotManifest(storeId, version, entries, lineage).toJson());
  }

  private OutputStream create(Path file) throws IOException {
    return localWrites != null ? localWrites.create(localWrites.file(file)) : fs.create(file, true);
  }

  /**
   * Deletes snapshot {@code version} when increment {@code version} now has another lineage than {@code lineage},
   * the snapshot's (a re-run batch rewrote the version while the snapshot uploaded: it is of an abandoned history).
   * Returns whether it did. Restores pass such a snapshot over anyway; this keeps it from lying there.
   */
  boolean deleteSnapshotIfAbandoned(long version, String storeId, byte[] lineage) throws IOException {
    if (lineage == null) return false;
    IncrementCodec.Header header = readHeader(version, storeId);
    if (header == null || header.lineage() == null || java.util.Arrays.equals(header.lineage(), lineage)) return false;
    fs.delete(snapshotPath(version), true);
    return true;
  }

  /** Copies snapshot {@code version} into {@code local}, checking every size and checksum. */
  SnapshotManifest downloadSnapshot(long version, File local) throws IOException {
    Path src = snapshotPath(version);
    Path manifestPath = new Path(src, MANIFEST);
    SnapshotManifest m = SnapshotManifest.parse(readAll(manifestPath), manifestPath.toString());
    if (m.version != version) {
      throw new IOException("Snapshot manifest " + manifestPath + " names version " + m.version);
    }
    local.mkdirs();
    byte[] buf = new byte[1 << 20];
    for (SnapshotManifest.FileEntry e : m.files) {
      Path p = new Path(src, e.name());
      CRC32 crc = new CRC32();
      long size = 0;
      try (InputStream in = fs.open(p); OutputStream out = new FileOutputStream(new File(local, e.name()))) {
        int n;
        while ((n = in.read(buf)) > 0) {
          crc.update(buf, 0, n);
          out.write(buf, 0, n);
          size += n;
        }
      } catch (FileNotFoundException ex) {
        throw new IOException("Missing snapshot file " + p + " listed in " + manifestPath, ex);
      }
      if (size != e.size()) {
        throw new IOException("Corrupt snapshot file " + p + ": size " + size + ", manifest says " + e.size());
      }
      if (crc.getValue() != e.crc32()) throw new IOException("Corrupt snapshot file " + p + ": checksum mismatch");
    }
    return m;
  }

  /**
   * Keeps the last {@code keep} versions (formats.md section 5). The base, the newest snapshot at or below the
   * oldest version kept, is one whose manifest can be read and whose lineage (when recorded) is increment
   * {@code base}'s: a snapshot of a history a re-run batch abandoned is deleted instead, since deleting the
   * increments below it would take the only record of the kept history's lineage at that version.
   */
  void retain(int keep, String storeId) throws IOException {
    Listing l = list();
    long latest = l.latest();
    long oldestKept = latest - keep + 1;
    Long base = null;
    for (long candidate : l.snapshots().headSet(oldestKept, true).descendingSet()) {
      Path manifestPath = new Path(snapshotPath(candidate), MANIFEST);
      SnapshotManifest m;
      try {
        m = SnapshotManifest.parse(readAll(manifestPath), manifestPath.toString());
      } catch (IOException e) {
        continue; // a restore passes it over and needs what lies below it
      }
      IncrementCodec.Header header = m.lineage == null ? null : readHeader(candidate, storeId);
      if (header == null || header.lineage() == null || java.util.Arrays.equals(header.lineage(), m.lineage)) {
        base = candidate;
        break;
      }
      fs.delete(snapshotPath(candidate), true);
    }
    if (base == null) return;
    for (long s : l.snapshots().headSet(base, false)) fs.delete(snapshotPath(s), true);
    for (long v : l.increments().headSet(base, true)) fs.delete(incrementPath(v), false);
  }

  /**
   * Before version {@code version} is rewritten (a re-run batch): delete the abandoned history, snapshots at
   * or above it and increments above it, newest first, as the Python engine does.
   */
  void supersedeFrom(long version) throws IOException {
    List<Path> stale = new ArrayList<>();
    FileStatus[] sts;
    try {
      sts = fs.listStatus(dir);
    } catch (FileNotFoundException e) {
      return;
    }
    TreeSet<Long> snaps = new TreeSet<>();
    TreeSet<Long> incs = new TreeSet<>();
    for (FileStatus st : sts) {
      Long v = parseVersion(st.getPath().getName(), SNAPSHOT);
      if (v != null && v >= version) snaps.add(v);
      v = parseVersion(st.getPath().getName(), INCREMENT);
      if (v != null && v > version) incs.add(v);
    }
    TreeSet<Long> all = new TreeSet<>(snaps);
    all.addAll(incs);
    for (long v : all.descendingSet()) {
      if (snaps.contains(v)) stale.add(snapshotPath(v));
      if (incs.contains(v)) stale.add(incrementPath(v));
    }
    for (Path p : stale) fs.delete(p, true);
  }

}
