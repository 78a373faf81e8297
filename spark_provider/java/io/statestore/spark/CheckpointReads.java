package io.statestore.spark;

import java.io.IOException;
import java.util.EnumMap;
import java.util.Map;
import java.util.concurrent.atomic.LongAdder;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSInputStream;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What this JVM read of Spark's RocksDB provider's state files from the checkpoint location, by kind (SST files,
 * snapshot zips, changelogs): bytes actually read, counted as the provider reads them. Each file read is logged
 * when its stream closes ("statestore-fs: ... read N bytes of ... from the checkpoint location"), with the
 * partition's store id: a test or an operator sees where a load's state came from.
 */
final class CheckpointReads {
  private static final Logger LOG = LoggerFactory.getLogger(CheckpointReads.class);
  private static final Map<StateFilePath.Kind, LongAdder> BYTES = new EnumMap<>(StateFilePath.Kind.class);
  private static final Map<StateFilePath.Kind, LongAdder> SERVED = new EnumMap<>(StateFilePath.Kind.class);

  static {
    for (StateFilePath.Kind kind : StateFilePath.Kind.values()) {
      BYTES.put(kind, new LongAdder());
      SERVED.put(kind, new LongAdder());
    }
  }

  private CheckpointReads() {}

  /** Bytes of {@code kind} this JVM read from the checkpoint location so far. */
  static long bytes(StateFilePath.Kind kind) {
    return BYTES.get(kind).sum();
  }

  /** Bytes of {@code kind} this JVM read from its local copies instead ({@link ReplicaFiles}). */
  static long servedBytes(StateFilePath.Kind kind) {
    return SERVED.get(kind).sum();
  }

  /** {@code in}, counting what is read of state file {@code file} (unchanged when {@code file} is null). */
  static FSDataInputStream counted(FSDataInputStream in, StateFilePath file) throws IOException {
    return counted(in, file, FrameCodec.SOURCE_CHECKPOINT);
  }

  /** {@code in}, counting what is read of {@code file} from {@code source}: a copy this host's executors kept
   * ({@code SOURCE_LOCAL}), one a peer's node shipped here ({@code SOURCE_REPLICA}), or the checkpoint location
   * ({@code SOURCE_CHECKPOINT}). The executor's state node hears of it for the partition's load report. */
  static FSDataInputStream counted(FSDataInputStream in, StateFilePath file, int source) throws IOException {
    // FSDataInputStream's constructor declares IOException; wrapping never throws it.
    return file == null ? in : new FSDataInputStream(new Counting(in, file, source));
  }

  /** A stream over another that counts the bytes read through it and reports them when closed. */
  private static final class Counting extends FSInputStream {
    private final FSDataInputStream in;
    private final StateFilePath file;
    private final int source;
    private long read;
    private boolean closed;

    Counting(FSDataInputStream in, StateFilePath file, int source) {
      this.in = in;
      this.file = file;
      this.source = source;
    }

    private int counted(int n) {
      if (n > 0) read += n;
      return n;
    }

    @Override
    public int read() throws IOException {
      int b = in.read();
      if (b >= 0) read++;
      return b;
    }

    @Override
    public int read(byte[] buffer, int offset, int length) throws IOException {
      return counted(in.read(buffer, offset, length));
    }

    @Override
    public int read(long position, byte[] buffer, int offset, int length) throws IOException {
      return counted(in.read(position, buffer, offset, length));
    }

    @Override
    public void readFully(long position, byte[] buffer, int offset, int length) throws IOException {
      in.readFully(position, buffer, offset, length);
      read += length;
    }

    @Override
    public void seek(long position) throws IOException {
      in.seek(position);
    }

    @Override
    public long getPos() throws IOException {
      return in.getPos();
    }

    @Override
    public boolean seekToNewSource(long target) throws IOException {
      return in.seekToNewSource(target);
    }

    @Override
    public int available() throws IOException {
      return in.available();
    }

    @Override
    public long skip(long n) throws IOException {
      return in.skip(n);
    }

    @Override
    public void close() throws IOException {
      if (closed) return;
      closed = true;
      in.close();
      record(file, read, source, "");
    }
  }

  /** Counts {@code bytes} of {@code file} a load read from {@code source}, logs it (with {@code how} appended:
   * how the copy was served, if not as a stream) and tells the state node. */
  static void record(StateFilePath file, long bytes, int source, String how) {
    boolean fromCopy = source != FrameCodec.SOURCE_CHECKPOINT;
    (fromCopy ? SERVED : BYTES).get(file.kind()).add(bytes);
    LOG.info("statestore-fs: {} read {} bytes of {} {} from {}{}", file.storeId(), bytes,
        file.kind().name().toLowerCase(java.util.Locale.ROOT), file.name(),
        !fromCopy ? "the checkpoint location"
            : source == FrameCodec.SOURCE_REPLICA ? "its local copy (shipped by a peer)" : "its local copy", how);
    FileShipping.read(file, bytes, source);
  }
}
