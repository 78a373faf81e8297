package io.statestore.spark;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.util.zip.CRC32;
import java.util.zip.CheckedInputStream;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSInputStream;
import org.apache.hadoop.fs.Path;

/**
 * A served local copy, its CRC32 checked as the load reads it rather than by a read of its own first (which cost a
 * second pass over every file a load reads). At the end of the file, or at close if the reader stopped early (a
 * changelog's reader stops at its end marker; the rest is read here) or moved about (the whole copy is read again
 * here), a copy whose bytes differ from what was kept is removed and the read fails: the load fails before it
 * commits anything, and its retry reads the checkpoint location.
 */
final class VerifyingStream extends FSInputStream {
  private final FSDataInputStream in;
  private final Path path;
  private final StateFilePath file;
  private final ReplicaFiles.Copy copy;
  private final CRC32 crc = new CRC32();
  private long pos;
  private boolean inOrder = true;
  private boolean verified;
  private boolean closed;

  VerifyingStream(FSDataInputStream in, Path path, StateFilePath file, ReplicaFiles.Copy copy) {
    this.in = in;
    this.path = path;
    this.file = file;
    this.copy = copy;
  }

  @Override
  public int read() throws IOException {
    int b = in.read();
    if (b < 0) {
      atEnd();
    } else {
      pos++;
      if (inOrder) crc.update(b);
    }
    return b;
  }

  @Override
  public int read(byte[] bytes, int offset, int length) throws IOException {
    int n = in.read(bytes, offset, length);
    if (n < 0) {
      atEnd();
    } else if (n > 0) {
      pos += n;
      if (inOrder) crc.update(bytes, offset, n);
    }
    return n;
  }

  @Override
  public void seek(long target) throws IOException {
    if (target != pos) inOrder = false;
    in.seek(target);
    pos = target;
  }

  @Override
  public long skip(long n) throws IOException {
    long skipped = in.skip(n);
    if (skipped > 0) inOrder = false;
    pos += skipped;
    return skipped;
  }

  @Override
  public long getPos() {
    return pos;
  }

  @Override
  public boolean seekToNewSource(long target) {
    return false;
  }

  @Override
  public int available() throws IOException {
    return in.available();
  }

  @Override
  public void close() throws IOException {
    if (closed) return;
    closed = true;
    try {
      if (!verified) {
        if (inOrder) {
          byte[] rest = new byte[64 * 1024];
          for (int n = in.read(rest); n >= 0; n = in.read(rest)) {
            pos += n;
            crc.update(rest, 0, n);
          }
          check(pos, crc.getValue());
        } else {
          CRC32 whole = new CRC32();
          long length;
          try (InputStream again = new CheckedInputStream(Files.newInputStream(copy.file().toPath()), whole)) {
            length = again.transferTo(java.io.OutputStream.nullOutputStream());
          }
          check(length, whole.getValue());
        }
      }
    } finally {
      in.close();
    }
  }

  private void atEnd() throws IOException {
    if (inOrder && !verified) check(pos, crc.getValue());
  }

  private void check(long length, long value) throws IOException {
    verified = true;
    String why = length != copy.size() ? "it has " + length + " bytes, " + copy.size() + " were kept"
        : value != copy.crc() ? "its checksum differs from the one taken when it was kept" : null;
    if (why == null) return;
    ReplicaFiles.dropCorrupt(path, file, copy, why);
    throw new IOException("statestore-fs: the local copy of " + file.storeId() + " " + file.name() + " is corrupt ("
        + why + "); the copies of its partition were removed, and a retry of the load reads the checkpoint location");
  }
}
