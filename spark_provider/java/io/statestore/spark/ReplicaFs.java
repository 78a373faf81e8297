package io.statestore.spark;

import java.io.File;
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
 * what Hadoop's {@code LocalFs} is (checksums over the raw local file system), with a local copy kept of each state
 * file as it gets its final name, served to later reads while trusted ({@link ReplicaFiles}), and reads counted.
 * {@code LocalFs}'s constructors are package-private, hence the same layers built here.
 */
public class ReplicaFs extends ChecksumFs {
  public ReplicaFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
    super(new Raw(uri, conf));
    this.conf = conf;
  }

  private final Configuration conf;

  // FilterFs sends each form of open straight to the raw layer: each is served and counted here.
  @Override
  public FSDataInputStream open(Path path) throws IOException {
    return open(path, getServerDefaults(path).getFileBufferSize());
  }

  @Override
  public FSDataInputStream open(Path path, int bufferSize) throws IOException {
    return ReplicaFiles.open(path, StateFilePath.of(path), this::getFileStatus,
        (p, copy) -> copy ? getMyFs().open(p, bufferSize) : super.open(p, bufferSize), conf);
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
    if (deleted) ReplicaFiles.forget(path, directory, conf);
    return deleted;
  }

  // Spark writes changelogs and snapshot zips to a temporary name, then renames them: the temporary file's bytes
  // are copied before the rename and served once it is done (a rename over an older file of that name, a re-run
  // batch, replaces the copy).
  @Override
  public void renameInternal(Path source, Path target) throws IOException {
    renameKeepingCopy(source, target, () -> super.renameInternal(source, target));
  }

  @Override
  public void renameInternal(Path source, Path target, boolean overwrite) throws IOException {
    renameKeepingCopy(source, target, () -> super.renameInternal(source, target, overwrite));
  }

  private interface Rename {
    void run() throws IOException;
  }

  private void renameKeepingCopy(Path source, Path target, Rename rename) throws IOException {
    ReplicaFiles.Staged staged =
        ReplicaFiles.stage(target, StateFilePath.of(target), new File(source.toUri().getPath()), conf);
    try {
      rename.run();
    } catch (IOException | RuntimeException e) {
      if (staged != null) staged.discard();
      throw e;
    }
    if (staged != null) staged.publish(ReplicaFiles.modified(target, this::getFileStatus));
  }

  // FilterFs hands the builder-based open straight to the raw layer, past the copies and ChecksumFs's checks: a
  // state file is served as open() serves it; any other file as before.
  @Override
  public CompletableFuture<FSDataInputStream> openFileWithOptions(Path path, OpenFileParameters parameters)
      throws IOException {
    if (StateFilePath.of(path) == null) return super.openFileWithOptions(path, parameters);
    int bufferSize = parameters.getBufferSize() > 0 ? parameters.getBufferSize()
        : getServerDefaults(path).getFileBufferSize();
    return CompletableFuture.completedFuture(open(path, bufferSize));
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
