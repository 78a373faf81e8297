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
  static final byte MATERIALIZE = 3;
  static final byte PROMOTE = 4;
  static final byte DEMOTE = 5;
  static final byte RELEASED = 6;
  static final byte MATERIALIZED = 7;
  static final byte INCOMING = 8;
  static final byte INCOMING_LIST = 9;
  static final byte LOAD = 10;

  static final int MATERIALIZED_OK = 0;
  static final int MATERIALIZED_NONE = 1;
  static final int MATERIALIZED_FAILED = 2;

  /** Where a load's state came from (PROMOTE's and MATERIALIZED's source field). */
  static final int SOURCE_LOCAL = 0;
  static final int SOURCE_REPLICA = 1;
  static final int SOURCE_PEER = 2;
  static final int SOURCE_CHECKPOINT = 3;

  static final int FLAG_PEER = 1;

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

  /** The fields of one frame, written in order (formats.md section 6: big-endian, strings u16-prefixed). */
  private static final class Fields {
    private final java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream(128);
    private final java.io.DataOutputStream data = new java.io.DataOutputStream(out);

    Fields str(String s) {
      byte[] u = s.getBytes(StandardCharsets.UTF_8);
      if (u.length > 0xFFFF) throw new IllegalArgumentException("string longer than 65535 bytes: " + s);
      try {
        data.writeShort(u.length);
        data.write(u);
      } catch (IOException e) {
        throw new java.io.UncheckedIOException(e); // a byte array does not fail
      }
      return this;
    }

    Fields u8(int v) {
      out.write(v);
      return this;
    }

    Fields u16(int v) {
      return raw(ByteBuffer.allocate(2).putShort((short) v).array());
    }

    Fields u32(long v) {
      return raw(ByteBuffer.allocate(4).putInt((int) v).array());
    }

    Fields u64(long v) {
      return raw(ByteBuffer.allocate(8).putLong(v).array());
    }

    Fields raw(byte[] b) {
      out.write(b, 0, b.length);
      return this;
    }

    /** The whole frame: {@code u32 length}, {@code u8 type}, the fields. */
    ByteBuffer frame(byte type) {
      byte[] f = out.toByteArray();
      return ByteBuffer.allocate(5 + f.length).putInt(1 + f.length).put(type).put(f).flip();
    }
  }

  /** The COMMITTED frame, length prefix included. */
  static ByteBuffer committed(String storeId, String checkpointDir, long version, boolean sync,
      boolean rewritesHistory, byte[] increment) {
    return new Fields().str(storeId).str(checkpointDir).u64(version)
        .u8((sync ? FLAG_SYNC : 0) | (rewritesHistory ? FLAG_REWRITES_HISTORY : 0))
        .u32(increment.length).raw(increment).frame(COMMITTED);
  }

  /** The RELEASED frame (the provider unloaded the store partition), length prefix included. */
  static ByteBuffer released(String storeId, String checkpointDir) {
    return new Fields().str(storeId).str(checkpointDir).frame(RELEASED);
  }

  /** The MATERIALIZE frame: a RocksDB checkpoint of the node's copy at version {@code version} or below into
   * {@code targetDir}; {@code allowPeer}: the node may fetch it from a peer when it holds none itself. */
  static ByteBuffer materialize(String storeId, String checkpointDir, long version, String targetDir,
      boolean allowPeer, long deadlineMs) {
    return new Fields().str(storeId).str(checkpointDir).u64(version).str(targetDir).u8(allowPeer ? FLAG_PEER : 0)
        .u32(deadlineMs).frame(MATERIALIZE);
  }

  /** The LOAD frame: what the batch that committed {@code version} cost its executor (load balancing). */
  static ByteBuffer load(String storeId, String checkpointDir, long version, long taskMillis, long rowsWritten,
      long stateBytes, int executorCores) {
    return new Fields().str(storeId).str(checkpointDir).u64(version).u32(Math.min(taskMillis, 0xFFFFFFFFL))
        .u64(rowsWritten).u64(stateBytes).u16(Math.min(executorCores, 0xFFFF)).frame(LOAD);
  }

  /** The INCOMING frame: which partitions a running hand-over moves to this node (no fields). */
  static ByteBuffer incoming() {
    return new Fields().frame(INCOMING);
  }

  /** One entry of an INCOMING_LIST: a partition moving to this node, and the version of the node's replica of it
   * (0: none yet). {@code checkpointDir} is in the node's normalized form. */
  record Incoming(String storeId, String checkpointDir, long version) {}

  /** Reads the INCOMING_LIST frame answering an INCOMING (blocking). */
  static java.util.List<Incoming> readIncomingList(SocketChannel channel) throws IOException {
    ByteBuffer body = readFrame(channel, INCOMING_LIST);
    int count = body.getShort() & 0xFFFF;
    java.util.List<Incoming> entries = new java.util.ArrayList<>(count);
    for (int i = 0; i < count; i++) entries.add(new Incoming(readString(body), readString(body), body.getLong()));
    if (body.hasRemaining()) throw new IOException("bad INCOMING_LIST frame: trailing bytes");
    return entries;
  }

  /** Who runs a partition's task, in Spark's terms: what the driver needs to steer the partition's next task. */
  record SparkPlace(String runId, String stateRoot, String executorId, String executorHost) {}

  /** The PROMOTE frame: the provider loaded {@code version} to write it. {@code load} is how it last loaded the
   * partition from somewhere else than its own directory (or this load, when there is none). */
  static ByteBuffer promote(String storeId, String checkpointDir, long version, byte[] lineage,
      StateLoader.Loaded load, long loadVersion, SparkPlace place) {
    return new Fields().str(storeId).str(checkpointDir).u64(version).raw(lineageBytes(lineage))
        .u8(load.source().code).u64(loadVersion).u64(load.fromVersion()).u32(Math.min(load.millis(), 0xFFFFFFFFL))
        .str(place.runId()).str(place.stateRoot()).str(place.executorId()).str(place.executorHost()).frame(PROMOTE);
  }

  /** The DEMOTE frame: the provider unloaded the store; its closed local directory is the node's to adopt. */
  static ByteBuffer demote(String storeId, String checkpointDir, long version, byte[] lineage, String dir) {
    return new Fields().str(storeId).str(checkpointDir).u64(version).raw(lineageBytes(lineage)).str(dir)
        .frame(DEMOTE);
  }

  private static byte[] lineageBytes(byte[] lineage) {
    if (lineage != null) return lineage;
    byte[] unknown = new byte[IncrementCodec.LINEAGE_BYTES];
    java.util.Arrays.fill(unknown, (byte) 0xff);
    return unknown;
  }

  /** A MATERIALIZED answer: the version and lineage of the copy now in the target directory, and where the node
   * took it from; or a status saying why there is none. */
  record Materialized(int status, long version, byte[] lineage, int source, String message) {
    boolean done() {
      return status == MATERIALIZED_OK;
    }
  }

  /** Reads the MATERIALIZED frame answering a MATERIALIZE (blocking). */
  static Materialized readMaterialized(SocketChannel channel) throws IOException {
    ByteBuffer body = readFrame(channel, MATERIALIZED);
    int status = body.get() & 0xFF;
    long version = body.getLong();
    byte[] lineage = new byte[IncrementCodec.LINEAGE_BYTES];
    body.get(lineage);
    int source = body.get() & 0xFF;
    String message = readString(body);
    if (body.hasRemaining()) throw new IOException("bad MATERIALIZED frame: trailing bytes");
    return new Materialized(status, version, java.util.Arrays.equals(lineage, lineageBytes(null)) ? null : lineage,
        source, message);
  }

  private static String readString(ByteBuffer body) throws IOException {
    int length = body.getShort() & 0xFFFF;
    if (length > body.remaining()) throw new IOException("bad string length " + length);
    byte[] bytes = new byte[length];
    body.get(bytes);
    return new String(bytes, StandardCharsets.UTF_8);
  }

  private static ByteBuffer readFrame(SocketChannel channel, byte expected) throws IOException {
    ByteBuffer header = readExactly(channel, 4);
    int length = header.getInt();
    if (length < 2 || length > MAX_REPLY_BYTES) throw new IOException("bad frame length " + length);
    ByteBuffer body = readExactly(channel, length);
    byte type = body.get();
    if (type == REPLY && expected != REPLY) {
      int status = body.get() & 0xFF;
      throw new IOException("the state node answered status " + status + ": " + readString(body));
    }
    if (type != expected) throw new IOException("expected a frame of type " + expected + ", got type " + type);
    return body;
  }

  /** Reads one REPLY frame (blocking). */
  static Reply readReply(SocketChannel channel) throws IOException {
    ByteBuffer body = readFrame(channel, REPLY);
    int status = body.get() & 0xFF;
    String message = readString(body);
    if (body.hasRemaining()) throw new IOException("bad reply: trailing bytes");
    return new Reply(status, message);
  }

  private static ByteBuffer readExactly(SocketChannel channel, int n) throws IOException {
    ByteBuffer buf = ByteBuffer.allocate(n);
    while (buf.hasRemaining()) {
      if (channel.read(buf) < 0) throw new EOFException("the state node closed the local channel");
    }
    return buf.flip();
  }
}
