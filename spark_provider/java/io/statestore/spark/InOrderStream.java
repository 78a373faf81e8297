package io.statestore.spark;

import java.io.IOException;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSInputStream;

/**
 * A read of a state file that watches its bytes go by in order: subclasses see each run of bytes read
 * ({@link #bytes}), the end of the file ({@link #atEnd}) and the first move out of order, a seek elsewhere or a
 * skip ({@link #outOfOrder}), after which they see no more bytes. {@link ReadThroughStream} copies them,
 * {@link VerifyingStream} checks them.
 */
abstract class InOrderStream extends FSInputStream {
  protected final FSDataInputStream in;
  protected long pos;
  protected boolean inOrder = true;
  private final byte[] one = new byte[1];

  InOrderStream(FSDataInputStream in) {
    this.in = in;
  }

  /** {@code length} bytes of the file, read in order from {@code pos - length}. */
  protected abstract void bytes(byte[] bytes, int offset, int length) throws IOException;

  /** The reader reached the end of the file, every byte seen in order. */
  protected abstract void atEnd() throws IOException;

  /** The reader moved out of order: no more bytes are seen. */
  protected abstract void outOfOrder();

  @Override
  public int read() throws IOException {
    int b = in.read();
    if (b < 0) {
      if (inOrder) atEnd();
    } else {
      pos++;
      if (inOrder) {
        one[0] = (byte) b;
        bytes(one, 0, 1);
      }
    }
    return b;
  }

  @Override
  public int read(byte[] bytes, int offset, int length) throws IOException {
    int n = in.read(bytes, offset, length);
    if (n < 0) {
      if (inOrder) atEnd();
    } else if (n > 0) {
      pos += n;
      if (inOrder) bytes(bytes, offset, n);
    }
    return n;
  }

  @Override
  public void seek(long target) throws IOException {
    if (target != pos) moved();
    in.seek(target);
    pos = target;
  }

  @Override
  public long skip(long n) throws IOException {
    long skipped = in.skip(n);
    if (skipped > 0) moved();
    pos += skipped;
    return skipped;
  }

  private void moved() {
    if (inOrder) {
      inOrder = false;
      outOfOrder();
    }
  }

  /** Reads what the reader left of the file, in order, through {@link #bytes}. */
  protected void readRest() throws IOException {
    byte[] rest = new byte[64 * 1024];
    for (int n = in.read(rest); n >= 0; n = in.read(rest)) {
      pos += n;
      bytes(rest, 0, n);
    }
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
}
