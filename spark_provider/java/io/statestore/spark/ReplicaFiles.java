package io.statestore.spark;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.zip.CRC32;
import java.util.zip.CheckedInputStream;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * This JVM's copies of Spark's RocksDB provider's state files, kept as they become final in the checkpoint
 * location (an SST when its upload closes, a snapshot zip or changelog when it is renamed to its final name), so
 * that a later load reads them from local disk. A copy is served only while the checkpoint's file has the size it
 * had when copied, and only if the copy's bytes still have the checksum taken then; otherwise the file is read
 * from the checkpoint location and the log says why. A rewrite of the same name (a re-run batch) replaces the copy.
 */
final class ReplicaFiles {
  private static final Logger LOG = LoggerFactory.getLogger(ReplicaFiles.class);
  /** Hadoop conf key (spark.hadoop.statestore.replicaFiles.dir): where the copies live. */
  static final String DIR_KEY = "statestore.replicaFiles.dir";

  private record Copy(File file, long size, long crc) {}

  private static final Map<String, Copy> COPIES = new ConcurrentHashMap<>();
  private static volatile File dir;

  private ReplicaFiles() {}

  private static File dir(Configuration conf) throws IOException {
    File d = dir;
    if (d == null) {
      synchronized (ReplicaFiles.class) {
        if (dir == null) {
          String configured = conf == null ? null : conf.get(DIR_KEY);
          File base = configured != null ? new File(configured) : new File(System.getProperty("java.io.tmpdir"));
          dir = new File(base, "statestore-replica-files-" + ProcessHandle.current().pid());
          Files.createDirectories(dir.toPath());
        }
        d = dir;
      }
    }
    return d;
  }

  private static String key(Path path) {
    return path.toUri().getPath();
  }

  /** Keeps a copy of the final state file {@code path}, whose bytes are in the local file {@code source}. A copy
   * that fails is logged and dropped: the checkpoint location still serves the file. */
  static void keep(Path path, StateFilePath file, File source, Configuration conf) {
    if (file == null) return;
    try {
      File copy = new File(dir(conf), Integer.toHexString(key(path).hashCode()) + "-" + file.name().replace('/', '_'));
      File staging = new File(copy.getPath() + ".tmp");
      CRC32 crc = new CRC32();
      try (InputStream in = new CheckedInputStream(Files.newInputStream(source.toPath()), crc)) {
        Files.copy(in, staging.toPath(), StandardCopyOption.REPLACE_EXISTING);
      }
      Files.move(staging.toPath(), copy.toPath(), StandardCopyOption.REPLACE_EXISTING,
          StandardCopyOption.ATOMIC_MOVE);
      COPIES.put(key(path), new Copy(copy, copy.length(), crc.getValue()));
    } catch (IOException | RuntimeException e) {
      COPIES.remove(key(path));
      LOG.warn("statestore-fs: no local copy of {} {} ({}); its loads read the checkpoint location", file.storeId(),
          file.name(), e.toString());
    }
  }

  /** The checkpoint deleted {@code path} (Spark's retention, or a directory with everything under it): its copies
   * go too. */
  static void forget(Path path) {
    String gone = key(path);
    COPIES.entrySet().removeIf(e -> {
      boolean under = e.getKey().equals(gone) || e.getKey().startsWith(gone.endsWith("/") ? gone : gone + "/");
      if (under && !e.getValue().file().delete() && e.getValue().file().exists()) {
        LOG.debug("statestore-fs: the local copy {} could not be deleted", e.getValue().file());
      }
      return under;
    });
  }

  /** The verified local copy of state file {@code path} whose checkpoint file is {@code size} bytes long, or null
   * when there is none to trust (the reason is logged). */
  static File trusted(Path path, StateFilePath file, long size) {
    if (file == null) return null;
    Copy copy = COPIES.get(key(path));
    if (copy == null) return null;
    String doubt = null;
    if (copy.size() != size) {
      doubt = "its size " + copy.size() + " differs from the checkpoint's " + size;
    } else {
      try {
        CRC32 crc = new CRC32();
        try (InputStream in = new CheckedInputStream(Files.newInputStream(copy.file().toPath()), crc)) {
          in.transferTo(java.io.OutputStream.nullOutputStream());
        }
        if (crc.getValue() != copy.crc()) doubt = "its bytes changed since it was kept (checksum differs)";
      } catch (IOException e) {
        doubt = "it cannot be read: " + e;
      }
    }
    if (doubt == null) return copy.file();
    COPIES.remove(key(path));
    LOG.info("statestore-fs: the local copy of {} {} is not used, {}; read from the checkpoint location",
        file.storeId(), file.name(), doubt);
    return null;
  }
}
