package io.statestore.spark;

import java.io.IOException;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;

/**
 * The checkpoint file system under Spark's own RocksDB provider, for {@code file:} checkpoint locations
 * ({@code fs.file.impl}): Hadoop's local file system, through which Spark's provider reads and writes its SST files
 * and snapshot zips, with its state files' reads counted ({@link CheckpointReads}). Every other path passes straight
 * through. It extends {@link LocalFileSystem}, as {@code FileSystem.getLocal} casts to it. Its other half, for
 * changelogs, is {@link ReplicaFs}.
 */
public class ReplicaFileSystem extends LocalFileSystem {
  /** Bytes of state files of {@code kind} (sst, snapshot, changelog) this JVM read from the checkpoint location. */
  public static long checkpointBytesRead(String kind) {
    return CheckpointReads.bytes(StateFilePath.Kind.valueOf(kind.toUpperCase(java.util.Locale.ROOT)));
  }

  @Override
  public FSDataInputStream open(Path path, int bufferSize) throws IOException {
    return CheckpointReads.counted(super.open(path, bufferSize), StateFilePath.of(path));
  }
}
