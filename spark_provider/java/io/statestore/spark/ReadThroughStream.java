package io.statestore.spark;

import java.io.IOException;
import java.io.OutputStream;
import org.apache.hadoop.fs.FSDataInputStream;

/** A read of a state file from the checkpoint location that also writes what it reads to a staged copy; at
 * close the copy reads what the reader left, and is published if it then holds exactly the file's length, read
 * in order. A seek or a skip drops the copy (the file is served from the checkpoint location as before). */
final class ReadThroughStream extends InOrderStream {
  private final ReplicaFiles.Staged staged;
  private final long size;
  private OutputStream copy;
  private boolean closed;

  ReadThroughStream(FSDataInputStream in, OutputStream copy, ReplicaFiles.Staged staged, long size) {
    super(in);
    this.copy = copy;
    this.staged = staged;
    this.size = size;
  }

  @Override
  protected void bytes(byte[] bytes, int offset, int length) {
    if (copy == null) return;
    try {
      copy.write(bytes, offset, length);
    } catch (IOException e) {
      drop();
    }
  }

  @Override
  protected void atEnd() {}

  @Override
  protected void outOfOrder() {
    drop();
  }

  @Override
  public void close() throws IOException {
    if (closed) return;
    closed = true;
    if (copy != null && pos < size) {
      // The reader stopped before the end (a changelog's reader stops at its end marker, or after its header):
      // the copy reads the rest, so that what it keeps is the whole file.
      try {
        readRest();
      } catch (IOException e) {
        drop();
      }
    }
    try {
      in.close();
    } finally { // the copy's file and staging name go either way
      if (copy != null) {
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
