package io.statestore.spark;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.net.URI;
import java.util.EnumSet;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.CreateFlag;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.FileUtil;
import org.apache.hadoop.fs.FilterFileSystem;
import org.apache.hadoop.fs.FutureDataInputStreamBuilder;
import org.apache.hadoop.fs.Options;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.impl.OpenFileParameters;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.util.Progressable;

/**
 * The checkpoint file layer for a checkpoint location of any scheme but {@code file} ({@code s3a}, {@code abfss},
 * {@code gs}, {@code hdfs}, {@code viewfs}...): the scheme's own file system, named by
 * {@code statestore.replicaFiles.wrapped.<scheme>.impl}, with the same local copies as {@link ReplicaFileSystem}
 * keeps for {@code file:}. Set as {@code fs.<scheme>.impl}; {@link ReplicaDelegateFs} is its FileContext half.
 *
 * <p>Where {@code file:}'s layer copies a temporary file's bytes from local disk before its rename, here the
 * temporary file lives in the remote store: its bytes are copied as they are written (a temporary name of a state
 * file, {@code .<name>.<uuid>.tmp}, is recognised by {@link StateFilePath#ofTemporary}) and the copy is published
 * when the rename to the final name succeeds. SSTs are uploaded with {@code copyFromLocalFile}, which is routed
 * through this file system's {@code create} (the wrapped one's would bypass it).
 */
public class ReplicaFilterFileSystem extends FilterFileSystem {
  /** Hadoop conf naming the class this layer wraps for {@code <scheme>}. */
  static final String WRAPPED_KEY = "statestore.replicaFiles.wrapped.%s.impl";

  /** Copies of temporary files being written, by the temporary file's path: published under the final name at the
   * rename (FileContext's and FileSystem's instances of this layer in one JVM share them). */
  private static final Map<String, ReplicaFiles.Staged> PENDING = new ConcurrentHashMap<>();
  private volatile RawLocalFileSystem local;

  public ReplicaFilterFileSystem() {
    super();
  }

  /** A layer over a not yet initialized instance of the class configured for {@code uri}'s scheme. */
  static ReplicaFilterFileSystem over(URI uri, Configuration conf) throws IOException {
    ReplicaFilterFileSystem layer = new ReplicaFilterFileSystem();
    layer.fs = wrapped(uri.getScheme(), conf);
    return layer;
  }

  private static FileSystem wrapped(String scheme, Configuration conf) throws IOException {
    String key = String.format(WRAPPED_KEY, scheme);
    String name = conf.getTrimmed(key, "");
    if (name.isEmpty()) {
      throw new IOException("statestore-fs: " + key + " is not set: the checkpoint file layer for " + scheme
          + ": paths needs the class of the file system it wraps (spark.hadoop." + key + ")");
    }
    if (name.equals(ReplicaFilterFileSystem.class.getName())) {
      throw new IOException("statestore-fs: " + key + " names this layer itself; it must name the " + scheme
          + ": file system the layer wraps");
    }
    try {
      Class<?> type = conf.getClassByName(name);
      if (!FileSystem.class.isAssignableFrom(type)) {
        throw new IOException("statestore-fs: " + key + " = " + name + " is not a Hadoop FileSystem");
      }
      return (FileSystem) type.getDeclaredConstructor().newInstance();
    } catch (ReflectiveOperationException e) {
      throw new IOException("statestore-fs: " + key + " = " + name + " cannot be loaded (" + e + "); is its jar on "
          + "the class path?", e);
    }
  }

  @Override
  public void initialize(URI name, Configuration conf) throws IOException {
    if (fs == null) fs = wrapped(name.getScheme(), conf);
    if (fs.getConf() == null || fs.getUri() == null) fs.initialize(name, conf);
    super.initialize(name, conf);
  }

  @Override
  public String getScheme() {
    return getUri().getScheme();
  }

  private RawLocalFileSystem local() throws IOException {
    RawLocalFileSystem found = local;
    if (found == null) {
      synchronized (this) {
        if (local == null) {
          RawLocalFileSystem raw = new RawLocalFileSystem();
          raw.initialize(URI.create("file:///"), getConf());
          local = raw;
        }
        found = local;
      }
    }
    return found;
  }

  // ---------------------------------------------------------------- reads

  @Override
  public FSDataInputStream open(Path path, int bufferSize) throws IOException {
    return ReplicaFiles.open(path, StateFilePath.of(path), this::getFileStatus,
        (p, copy) -> copy ? local().open(p, bufferSize) : ReplicaFiles.beneath(() -> fs.open(p, bufferSize)), getConf());
  }

  // The wrapped file system's builder-based open would read past the copies and the counters.
  @Override
  protected CompletableFuture<FSDataInputStream> openFileWithOptions(Path path, OpenFileParameters parameters)
      throws IOException {
    if (StateFilePath.of(path) == null) return ReplicaFiles.beneath(() -> super.openFileWithOptions(path, parameters));
    return CompletableFuture.completedFuture(open(path, parameters.getBufferSize()));
  }

  // FilterFileSystem hands openFile to the wrapped file system, whose builder reads past the copies and the
  // counters; Hadoop 3.4's FileUtil.copy (the fallback of copyToLocalFile below) opens with it.
  @Override
  public FutureDataInputStreamBuilder openFile(Path path) throws IOException, UnsupportedOperationException {
    if (StateFilePath.of(path) == null) return super.openFile(path);
    return createDataInputStreamBuilder(this, path);
  }

  @Override
  public void copyToLocalFile(boolean delSrc, Path src, Path dst) throws IOException {
    copyToLocalFile(delSrc, src, dst, false);
  }

  // Spark's file manager copies each SST a load lacks into RocksDB's working directory: a trusted local copy is
  // hard-linked there; any other copy reads through open() (counted, and kept as a copy as it is read).
  @Override
  public void copyToLocalFile(boolean delSrc, Path src, Path dst, boolean useRawLocalFileSystem) throws IOException {
    StateFilePath file = delSrc ? null : StateFilePath.of(src);
    String scheme = dst.toUri().getScheme();
    boolean localTarget = scheme == null || scheme.equals("file");
    if (file != null && localTarget
        && ReplicaFiles.link(src, file, getFileStatus(src), new java.io.File(dst.toUri().getPath()), getConf())) {
      return;
    }
    if (file == null) {
      ReplicaFiles.beneath(() -> {
        fs.copyToLocalFile(delSrc, src, dst, useRawLocalFileSystem);
        return null;
      });
      return;
    }
    FileSystem target = useRawLocalFileSystem ? local() : FileSystem.getLocal(getConf());
    FileUtil.copy(this, src, target, dst, false, getConf());
  }

  // ---------------------------------------------------------------- writes

  @Override
  public FSDataOutputStream create(Path path, FsPermission permission, boolean overwrite, int bufferSize,
      short replication, long blockSize, Progressable progress) throws IOException {
    return copying(path, ReplicaFiles.beneath(
        () -> fs.create(path, permission, overwrite, bufferSize, replication, blockSize, progress)));
  }

  @Override
  public FSDataOutputStream create(Path path, FsPermission permission, EnumSet<CreateFlag> flags, int bufferSize,
      short replication, long blockSize, Progressable progress, Options.ChecksumOpt checksumOpt)
      throws IOException {
    return copying(path, ReplicaFiles.beneath(
        () -> fs.create(path, permission, flags, bufferSize, replication, blockSize, progress, checksumOpt)));
  }

  @Override
  public FSDataOutputStream createNonRecursive(Path path, FsPermission permission, EnumSet<CreateFlag> flags,
      int bufferSize, short replication, long blockSize, Progressable progress) throws IOException {
    return copying(path, ReplicaFiles.beneath(
        () -> fs.createNonRecursive(path, permission, flags, bufferSize, replication, blockSize, progress)));
  }

  // FileContext's writes (ReplicaDelegateFs) arrive here.
  @SuppressWarnings("deprecation")
  @Override
  protected FSDataOutputStream primitiveCreate(Path path, FsPermission permission, EnumSet<CreateFlag> flags,
      int bufferSize, short replication, long blockSize, Progressable progress, Options.ChecksumOpt checksumOpt)
      throws IOException {
    return copying(path, ReplicaFiles.beneath(() ->
        super.primitiveCreate(path, permission, flags, bufferSize, replication, blockSize, progress, checksumOpt)));
  }

  // Spark uploads each SST with copyFromLocalFile: through create() here, so that the upload keeps a copy.
  @Override
  public void copyFromLocalFile(boolean delSrc, Path src, Path dst) throws IOException {
    copyFromLocalFile(delSrc, true, src, dst);
  }

  @Override
  public void copyFromLocalFile(boolean delSrc, boolean overwrite, Path src, Path dst) throws IOException {
    if (StateFilePath.of(dst) == null) {
      ReplicaFiles.beneath(() -> {
        fs.copyFromLocalFile(delSrc, overwrite, src, dst);
        return null;
      });
      return;
    }
    FileUtil.copy(FileSystem.getLocal(getConf()), src, this, dst, delSrc, overwrite, getConf());
  }

  /** {@code out}, writing {@code path}, with its bytes also copied when it is a state file (published at close) or a
   * state file's temporary (published by the rename to the final name). */
  private FSDataOutputStream copying(Path path, FSDataOutputStream out) throws IOException {
    StateFilePath file = StateFilePath.of(path);
    if (file != null) return new FSDataOutputStream(ReplicaFiles.teeing(out, path, file, getConf(), this::getFileStatus), null);
    Path target = StateFilePath.finalOfTemporary(path);
    StateFilePath finalFile = target == null ? null : StateFilePath.of(target);
    if (finalFile == null) return out;
    TeeStream teed = ReplicaFiles.teeingUntilRename(out, target, finalFile, getConf());
    if (teed == null) return out;
    String pending = path.toUri().getPath();
    ReplicaFiles.Staged previous = PENDING.put(pending, teed.staged());
    if (previous != null) previous.discard();
    teed.noteAbortedBy(() -> PENDING.remove(pending, teed.staged()));
    return new FSDataOutputStream(teed, null);
  }

  @Override
  public boolean rename(Path source, Path target) throws IOException {
    ReplicaFiles.Staged staged = PENDING.remove(source.toUri().getPath());
    boolean renamed;
    try {
      renamed = ReplicaFiles.beneath(() -> fs.rename(source, target));
    } catch (IOException | RuntimeException e) {
      if (staged != null) staged.discard();
      throw e;
    }
    published(staged, renamed, target);
    return renamed;
  }

  @SuppressWarnings("deprecation")
  @Override
  protected void rename(Path source, Path target, Options.Rename... options) throws IOException {
    ReplicaFiles.Staged staged = PENDING.remove(source.toUri().getPath());
    try {
      ReplicaFiles.beneath(() -> {
        super.rename(source, target, options);
        return null;
      });
    } catch (IOException | RuntimeException e) {
      if (staged != null) staged.discard();
      throw e;
    }
    published(staged, true, target);
  }

  private void published(ReplicaFiles.Staged staged, boolean renamed, Path target) {
    if (staged == null) return;
    if (renamed && staged.isComplete() && StateFilePath.of(target) != null) {
      staged.publish(ReplicaFiles.modified(target, this::getFileStatus));
    } else {
      staged.discard();
    }
  }

  @Override
  public boolean delete(Path path, boolean recursive) throws IOException {
    ReplicaFiles.Staged staged = PENDING.remove(path.toUri().getPath());
    if (staged != null) staged.discard();
    boolean directory;
    try {
      directory = recursive && getFileStatus(path).isDirectory();
    } catch (FileNotFoundException e) {
      return false;
    }
    boolean deleted = ReplicaFiles.beneath(() -> fs.delete(path, recursive));
    if (deleted) ReplicaFiles.forget(path, directory, getConf());
    return deleted;
  }
}
