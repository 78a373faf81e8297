package io.statestore.spark;

import java.io.IOException;
import java.io.OutputStream;
import org.apache.hadoop.fs.Abortable;
import org.apache.hadoop.fs.StreamCapabilities;
import org.apache.hadoop.fs.Syncable;

/** A state file's upload that also writes every byte, while it can, to a staged local copy
 * ({@link ReplicaFiles#teeing}), published when the upload closes, or (an object store's temporary file) marked
 * complete then, for the rename to the final name to publish. */
final class TeeStream extends OutputStream implements Syncable, Abortable, StreamCapabilities {
  private final OutputStream upload;
  private final ReplicaFiles.Staged staged;
  private final boolean untilRename;
  private OutputStream copy;

  private java.util.function.LongSupplier modifiedAfterUpload = () -> 0;
  private Runnable afterAbort = () -> { };

  /** What else to forget when the upload is aborted (the layer's record of a temporary file being written). */
  void noteAbortedBy(Runnable forget) {
    afterAbort = forget;
  }

  /** How to learn the uploaded file's modification time (ms, 0 when not known) once its upload is closed. */
  void noteModifiedBy(java.util.function.LongSupplier modified) {
    modifiedAfterUpload = modified;
  }

  TeeStream(OutputStream upload, OutputStream copy, ReplicaFiles.Staged staged, boolean untilRename) {
    this.upload = upload;
    this.copy = copy;
    this.staged = staged;
    this.untilRename = untilRename;
  }

  /** The copy being made. */
  ReplicaFiles.Staged staged() {
    return staged;
  }

  @Override
  public void write(int b) throws IOException {
    upload.write(b);
    if (copy != null) {
      try {
        copy.write(b);
      } catch (IOException e) {
        dropCopy(e);
      }
    }
  }

  @Override
  public void write(byte[] bytes, int offset, int length) throws IOException {
    upload.write(bytes, offset, length);
    if (copy != null) {
      try {
        copy.write(bytes, offset, length);
      } catch (IOException e) {
        dropCopy(e);
      }
    }
  }

  @Override
  public void flush() throws IOException {
    upload.flush();
  }

  // The upload's durability calls reach it as they would without the copy.
  @Override
  public void hflush() throws IOException {
    if (upload instanceof Syncable syncable) {
      syncable.hflush();
    } else {
      upload.flush();
    }
  }

  @Override
  public void hsync() throws IOException {
    if (upload instanceof Syncable syncable) {
      syncable.hsync();
    } else {
      upload.flush();
    }
  }

  @Override
  public void close() throws IOException {
    OutputStream kept = copy;
    copy = null;
    try {
      upload.close();
    } catch (IOException | RuntimeException e) {
      if (kept != null) closeQuietly(kept);
      staged.discard();
      throw e;
    }
    if (kept == null) return;
    try {
      kept.close();
      if (untilRename) {
        staged.markComplete();
      } else {
        staged.publish(modifiedAfterUpload.getAsLong());
      }
    } catch (IOException e) {
      staged.failed(e);
    }
  }

  // Spark's checkpoint file manager for object stores aborts a cancelled write instead of closing it (the object
  // is never created): the copy goes with it, and the abort reaches the upload as it would without the copy.
  @Override
  public AbortableResult abort() {
    OutputStream kept = copy;
    copy = null;
    if (kept != null) closeQuietly(kept);
    staged.discard();
    afterAbort.run();
    if (upload instanceof Abortable abortable) return abortable.abort();
    throw new UnsupportedOperationException("statestore-fs: the upload of " + staged.describe()
        + " beneath the replica file layer cannot be aborted");
  }

  @Override
  public boolean hasCapability(String capability) {
    return upload instanceof StreamCapabilities capabilities && capabilities.hasCapability(capability);
  }

  private void dropCopy(IOException e) {
    closeQuietly(copy);
    copy = null;
    staged.failed(e);
  }

  private static void closeQuietly(OutputStream out) {
    try {
      out.close();
    } catch (IOException ignored) {
      // the copy is dropped anyway
    }
  }
}
