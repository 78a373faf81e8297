package io.statestore.spark;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.util.concurrent.CompletableFuture;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.impl.OpenFileParameters;

/**
 * {@link ReplicaFileSystem}'s other half, for Hadoop's {@code FileContext} ({@code fs.AbstractFileSystem.file.impl}),
 * through which Spark's default checkpoint file manager reads and writes changelogs, snapshot zips and metadata:
 * what Hadoop's {@code LocalFs} is (checksums over the raw local file system), with state files' reads counted.
 * {@code LocalFs}'s constructors are package-private, hence the same layers built here.
 */
public class ReplicaFs extends ChecksumFs {
  public ReplicaFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
    super(new Raw(uri, conf));
  }

  // FilterFs sends each form of open straight to the raw layer: each is counted here.
  @Override
  public FSDataInputStream open(Path path) throws IOException {
    return CheckpointReads.counted(super.open(path), StateFilePath.of(path));
  }

  @Override
  public FSDataInputStream open(Path path, int bufferSize) throws IOException {
    return CheckpointReads.counted(super.open(path, bufferSize), StateFilePath.of(path));
  }

  @Override
  public CompletableFuture<FSDataInputStream> openFileWithOptions(Path path, OpenFileParameters parameters)
      throws IOException {
    StateFilePath file = StateFilePath.of(path);
    return super.openFileWithOptions(path, parameters).thenApply(in -> {
      try {
        return CheckpointReads.counted(in, file);
      } catch (IOException e) {
        throw new java.io.UncheckedIOException(e);
      }
    });
  }

  /** The raw local file system as an AbstractFileSystem (what Hadoop's package-private RawLocalFs is). */
  private static final class Raw extends DelegateToFileSystem {
    Raw(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(uri, new RawLocalFileSystem(), conf, "file", false);
    }

    @Override
    public int getUriDefaultPort() {
      return -1;
    }
  }
}
