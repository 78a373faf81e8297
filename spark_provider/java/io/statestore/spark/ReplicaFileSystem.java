package io.statestore.spark;

import java.io.IOException;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.util.Progressable;

/**
 * The checkpoint file system under Spark's own RocksDB provider, for {@code file:} checkpoint locations
 * ({@code fs.file.impl}): Hadoop's local file system, through which Spark's provider uploads its SST files (each
 * written once, straight to its final name) and reads them and snapshot zips back. An SST is kept as a local copy
 * when its upload closes ({@link ReplicaFiles}); a read of a state file with a trusted copy reads the copy; every
 * read is counted ({@link CheckpointReads}). Every other path passes straight through. It extends
 * {@link LocalFileSystem}, as {@code FileSystem.getLocal} casts to it. Its other half, for changelogs and snapshot
 * zips written through FileContext, is {@link ReplicaFs}.
 */
public class ReplicaFileSystem extends LocalFileSystem {
  /** Bytes of state files of {@code kind} (sst, snapshot, changelog) this JVM read from the checkpoint location. */
  public static long checkpointBytesRead(String kind) {
    return CheckpointReads.bytes(kind(kind));
  }

  /** Bytes of state files of {@code kind} this JVM read from its local copies instead of the checkpoint location. */
  public static long copyBytesRead(String kind) {
    return CheckpointReads.servedBytes(kind(kind));
  }

  private static StateFilePath.Kind kind(String kind) {
    return StateFilePath.Kind.valueOf(kind.toUpperCase(java.util.Locale.ROOT));
  }

  @Override
  public FSDataInputStream open(Path path, int bufferSize) throws IOException {
    return ReplicaFiles.open(path, StateFilePath.of(path), this::getFileStatus,
        (p, copy) -> copy ? getRaw().open(p, bufferSize) : super.open(p, bufferSize), getConf());
  }

  // Spark's file manager copies each SST a load lacks with copyToLocalFile: a trusted local copy is hard-linked
  // into RocksDB's working directory instead of being read and written again.
  @Override
  public void copyToLocalFile(boolean delSrc, Path src, Path dst) throws IOException {
    if (!linked(delSrc, src, dst)) super.copyToLocalFile(delSrc, src, dst);
  }

  @Override
  public void copyToLocalFile(boolean delSrc, Path src, Path dst, boolean useRawLocalFileSystem) throws IOException {
    if (!linked(delSrc, src, dst)) super.copyToLocalFile(delSrc, src, dst, useRawLocalFileSystem);
  }

  private boolean linked(boolean delSrc, Path src, Path dst) throws IOException {
    StateFilePath file = delSrc ? null : StateFilePath.of(src);
    String scheme = dst.toUri().getScheme();
    if (file == null || (scheme != null && !scheme.equals("file"))) return false;
    return ReplicaFiles.link(src, file, getFileStatus(src), new java.io.File(dst.toUri().getPath()), getConf());
  }

  @Override
  public boolean delete(Path path, boolean recursive) throws IOException {
    boolean directory;
    try {
      directory = recursive && getFileStatus(path).isDirectory();
    } catch (java.io.FileNotFoundException e) {
      return false;
    }
    boolean deleted = super.delete(path, recursive);
    if (deleted) ReplicaFiles.forget(path, directory, getConf());
    return deleted;
  }

  // With spark.sql.streaming.checkpointFileManagerClass set to Spark's FileSystem-based manager, changelogs and
  // zips are renamed here rather than through FileContext: the same copy before the rename, published after.
  @Override
  public boolean rename(Path source, Path target) throws IOException {
    StateFilePath file = StateFilePath.of(target);
    ReplicaFiles.Staged staged = file == null ? null : ReplicaFiles.stage(target, file, pathToFile(source), getConf());
    boolean renamed;
    try {
      renamed = super.rename(source, target);
    } catch (IOException | RuntimeException e) {
      if (staged != null) staged.discard();
      throw e;
    }
    if (staged != null) {
      if (renamed) {
        staged.publish(ReplicaFiles.modified(target, this::getFileStatus));
      } else {
        staged.discard();
      }
    }
    return renamed;
  }

  @Override
  public FSDataOutputStream create(Path path, FsPermission permission, boolean overwrite, int bufferSize,
      short replication, long blockSize, Progressable progress) throws IOException {
    FSDataOutputStream out = super.create(path, permission, overwrite, bufferSize, replication, blockSize, progress);
    StateFilePath file = StateFilePath.of(path);
    if (file == null) return out;
    return new FSDataOutputStream(ReplicaFiles.teeing(out, path, file, getConf(), this::getFileStatus), null);
  }
}
