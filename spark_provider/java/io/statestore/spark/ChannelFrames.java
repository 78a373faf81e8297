package io.statestore.spark;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;

/** The frames of the local channel between the provider and its state node (formats.md section 6). */
final class ChannelFrames {
  static final byte COMMITTED = 1;
  static final byte REPLY = 2;
  static final byte RELEASED = 6;

  static final int STATUS_ACCEPTED = 0;
  static final int STATUS_REPLICATED = 1;
  static final int STATUS_NOT_REPLICATED = 2;
  static final int STATUS_REFUSED = 3;

  static final int FLAG_SYNC = 1;
  static final int FLAG_REWRITES_HISTORY = 2;

  private static final int MAX_REPLY_BYTES = 1 << 20;

  /** A REPLY: its status and message. */
  record Reply(int status, String message) {
    String statusName() {
      return switch (status) {
        case STATUS_ACCEPTED -> "accepted";
        case STATUS_REPLICATED -> "replicated";
        case STATUS_NOT_REPLICATED -> "not replicated in time";
        case STATUS_REFUSED -> "refused";
        default -> "unknown status " + status;
      };
    }
  }

  private ChannelFrames() {}

  /** The COMMITTED frame, length prefix included. */
  static ByteBuffer committed(String storeId, String checkpointDir, long version, boolean sync,
      boolean rewritesHistory, byte[] increment) {
    byte[] id = storeId.getBytes(StandardCharsets.UTF_8);
    byte[] dir = checkpointDir.getBytes(StandardCharsets.UTF_8);
    if (id.length > 0xFFFF || dir.length > 0xFFFF) throw new IllegalArgumentException("string longer than 65535");
    int fields = 2 + id.length + 2 + dir.length + 8 + 1 + 4 + increment.length;
    ByteBuffer buf = ByteBuffer.allocate(4 + 1 + fields);
    buf.putInt(1 + fields).put(COMMITTED);
    buf.putShort((short) id.length).put(id);
    buf.putShort((short) dir.length).put(dir);
    buf.putLong(version);
    buf.put((byte) ((sync ? FLAG_SYNC : 0) | (rewritesHistory ? FLAG_REWRITES_HISTORY : 0)));
    buf.putInt(increment.length).put(increment);
    return buf.flip();
  }

  /** The RELEASED frame (the provider unloaded the store partition), length prefix included. */
  static ByteBuffer released(String storeId, String checkpointDir) {
    byte[] id = storeId.getBytes(StandardCharsets.UTF_8);
    byte[] dir = checkpointDir.getBytes(StandardCharsets.UTF_8);
    if (id.length > 0xFFFF || dir.length > 0xFFFF) throw new IllegalArgumentException("string longer than 65535");
    int fields = 2 + id.length + 2 + dir.length;
    ByteBuffer buf = ByteBuffer.allocate(4 + 1 + fields);
    buf.putInt(1 + fields).put(RELEASED);
    buf.putShort((short) id.length).put(id);
    buf.putShort((short) dir.length).put(dir);
    return buf.flip();
  }

  /** Reads one REPLY frame (blocking). */
  static Reply readReply(SocketChannel channel) throws IOException {
    ByteBuffer header = readExactly(channel, 4);
    int length = header.getInt();
    if (length < 4 || length > MAX_REPLY_BYTES) throw new IOException("bad reply frame length " + length);
    ByteBuffer body = readExactly(channel, length);
    byte type = body.get();
    if (type != REPLY) throw new IOException("expected a REPLY frame, got type " + type);
    int status = body.get() & 0xFF;
    int messageLength = body.getShort() & 0xFFFF;
    if (messageLength != body.remaining()) throw new IOException("bad reply message length " + messageLength);
    byte[] message = new byte[messageLength];
    body.get(message);
    return new Reply(status, new String(message, StandardCharsets.UTF_8));
  }

  private static ByteBuffer readExactly(SocketChannel channel, int n) throws IOException {
    ByteBuffer buf = ByteBuffer.allocate(n);
    while (buf.hasRemaining()) {
      if (channel.read(buf) < 0) throw new EOFException("the state node closed the local channel");
    }
    return buf.flip();
  }
}
