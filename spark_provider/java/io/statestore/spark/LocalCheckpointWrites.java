package io.statestore.spark;

import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Set;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Creates files and directories in a checkpoint location on the local file system through java.nio, with the
 * permissions Hadoop's local file system would give them.
 *
 * <p>Why not through Hadoop: without its native library (a pyspark install has none), Hadoop's local file system
 * sets the permissions of every file and directory it creates by starting a {@code chmod} process. A provider
 * writes one increment per commit, on the task's thread: at 400 stores on a two-executor cluster that was about
 * 200 processes per executor per micro-batch, and a create with its rename cost 13 to 19 ms (about 10 ms of CPU)
 * from a 2 GB executor JVM, against 1.4 ms here. Only Hadoop's stock local file systems are bypassed: a
 * {@code fs.file.impl} of the user's (or the replica-files layer, {@link ReplicaFileSystem}) keeps every write.
 */
final class LocalCheckpointWrites {
  /** Classes of the {@code file:} scheme whose writes are plain local files. Hive's, in pyspark's jars, is a
   * {@code FilterFileSystem} over {@link LocalFileSystem} that only changes how paths resolve. */
  private static final Set<String> STOCK_LOCAL = Set.of(
      LocalFileSystem.class.getName(),
      RawLocalFileSystem.class.getName(),
      "org.apache.hadoop.hive.ql.io.ProxyLocalFileSystem");

  private final FileSystem fs;
  private final Set<PosixFilePermission> filePermissions;
  private final Set<PosixFilePermission> directoryPermissions;

  private LocalCheckpointWrites(FileSystem fs, Configuration conf) {
    this.fs = fs;
    FsPermission umask = FsPermission.getUMask(conf);
    this.filePermissions = posix(FsPermission.getFileDefault().applyUMask(umask));
    this.directoryPermissions = posix(FsPermission.getDirDefault().applyUMask(umask));
  }

  /** The local writer for {@code fs}, or null when its writes must go through it (not the local file system, or
   * a file system of the user's for {@code file:}). */
  static LocalCheckpointWrites forFileSystem(FileSystem fs, Configuration conf) {
    if (!"file".equals(fs.getUri().getScheme()) || !STOCK_LOCAL.contains(fs.getClass().getName())) return null;
    return new LocalCheckpointWrites(fs, conf);
  }

  private static Set<PosixFilePermission> posix(FsPermission permission) {
    return PosixFilePermissions.fromString(permission.toString());
  }

  /** The local file {@code path} names (as Hadoop's local file system resolves it: its path part). */
  File file(Path path) {
    return new File(fs.makeQualified(path).toUri().getPath());
  }

  /** Creates {@code dir} and its missing parents, each with Hadoop's directory permissions. */
  void mkdirs(File dir) throws IOException {
    if (dir.isDirectory()) return;
    File parent = dir.getParentFile();
    if (parent != null) mkdirs(parent);
    try {
      Files.createDirectory(dir.toPath());
    } catch (java.nio.file.FileAlreadyExistsException e) {
      if (dir.isDirectory()) return; // another task made it meanwhile
      throw new IOException("Cannot create directory " + dir + ": a file of that name is in the way", e);
    }
    Files.setPosixFilePermissions(dir.toPath(), directoryPermissions);
  }

  /** A new file {@code target} (replaced if there), its parents created, with Hadoop's file permissions. */
  OutputStream create(File target) throws IOException {
    File parent = target.getParentFile();
    if (parent != null) mkdirs(parent);
    FileOutputStream out = new FileOutputStream(target);
    try {
      Files.setPosixFilePermissions(target.toPath(), filePermissions);
    } catch (IOException | RuntimeException e) {
      out.close();
      throw e;
    }
    return out;
  }

  /** Writes {@code bytes} to a temporary file beside {@code target}, syncs it and renames it over the target in one
   * step (a re-run batch rewrites its version; a reader sees the old file or the new one, never a part). */
  void writeAtomically(File target, byte[] bytes) throws IOException {
    File tmp = new File(target.getParentFile(), "." + target.getName() + "." + java.util.UUID.randomUUID() + ".tmp");
    try {
      try (FileOutputStream out = (FileOutputStream) create(tmp)) {
        out.write(bytes);
        out.getFD().sync();
      }
      Files.move(tmp.toPath(), target.toPath(), StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    } catch (IOException e) {
      Files.deleteIfExists(tmp.toPath());
      throw new IOException("Cannot write " + target + ": " + e.getMessage(), e);
    }
  }
}
