package io.statestore.spark;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.util.zip.CRC32;
import java.util.zip.CheckedInputStream;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.Path;

/**
 * A served local copy, its CRC32 checked as the load reads it rather than by a read of its own first (which cost a
 * second pass over every file a load reads). At the end of the file, or at close if the reader stopped early (a
 * changelog's reader stops at its end marker; the rest is read here) or moved about (the whole copy is read again
 * here), a copy whose bytes differ from what was kept is removed and the read fails: the load fails before it
 * commits anything, and its retry reads the checkpoint location.
 */
final class VerifyingStream extends InOrderStream {
  private final Path path;
  private final StateFilePath file;
  private final ReplicaFiles.Copy copy;
  private final CRC32 crc = new CRC32();
  private boolean verified;
  private boolean closed;

  VerifyingStream(FSDataInputStream in, Path path, StateFilePath file, ReplicaFiles.Copy copy) {
    super(in);
    this.path = path;
    this.file = file;
    this.copy = copy;
  }

  @Override
  protected void bytes(byte[] bytes, int offset, int length) {
    crc.update(bytes, offset, length);
  }

  @Override
  protected void atEnd() throws IOException {
    if (!verified) check(pos, crc.getValue());
  }

  @Override
  protected void outOfOrder() {}

  @Override
  public void close() throws IOException {
    if (closed) return;
    closed = true;
    try {
      if (!verified) {
        if (inOrder) {
          readRest();
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
