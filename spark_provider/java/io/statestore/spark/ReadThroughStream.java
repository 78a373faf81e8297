package io.statestore.spark;

import java.io.IOException;
import java.io.OutputStream;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSInputStream;

/** A read of a state file from the checkpoint location that also writes what it reads to a staged copy; at
 * close the copy reads what the reader left, and is published if it then holds exactly the file's length, read
 * in order. A seek or a skip drops the copy (the file is served from the checkpoint location as before). */
final class ReadThroughStream extends FSInputStream {
  private final FSDataInputStream in;
  private final ReplicaFiles.Staged staged;
  private final long size;
  private OutputStream copy;
  private long pos;
  private boolean closed;

  ReadThroughStream(FSDataInputStream in, OutputStream copy, ReplicaFiles.Staged staged, long size) {
    this.in = in;
    this.copy = copy;
    this.staged = staged;
    this.size = size;
  }

  @Override
  public int read() throws IOException {
    int b = in.read();
    if (b >= 0) {
      pos++;
      if (copy != null) {
        try {
          copy.write(b);
        } catch (IOException e) {
          drop();
        }
      }
    }
    return b;
  }

  @Override
  public int read(byte[] bytes, int offset, int length) throws IOException {
    int n = in.read(bytes, offset, length);
    if (n > 0) {
      pos += n;
      if (copy != null) {
        try {
          copy.write(bytes, offset, n);
        } catch (IOException e) {
          drop();
        }
      }
    }
    return n;
  }

  @Override
  public void seek(long target) throws IOException {
    if (target != pos) drop();
    in.seek(target);
    pos = target;
  }

  @Override
  public long skip(long n) throws IOException {
    long skipped = in.skip(n);
    if (skipped > 0) drop();
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
    if (copy != null && pos < size) {
      // The reader stopped before the end (a changelog's reader stops at its end marker, or after its header):
      // the copy reads the rest, so that what it keeps is the whole file.
      try {
        pos += in.transferTo(copy);
      } catch (IOException e) {
        drop();
      }
    }
    in.close();
    if (copy == null) return;
    OutputStream kept = copy;
    copy = null;
    try {
      kept.close();
      if (pos == size) {
        staged.publish();
      } else {
        staged.discard();
      }
    } catch (IOException e) {
      staged.discard();
    }
  }

  private void drop() {
    if (copy == null) return;
    try {
      copy.close();
    } catch (IOException ignored) {
      // the copy is dropped anyway
    }
    copy = null;
    staged.discard();
  }
}
