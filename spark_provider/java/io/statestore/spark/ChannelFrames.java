package io.statestore.spark;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;

/**
 * The provider's side of the local channel (formats.md section 6): the frames it sends, built from its own types,
 * and the answers it reads off the socket. The frames' layout is {@link FrameCodec}'s, generated from
 * protos/contract/local_channel.toml together with the node's side.
 */
final class ChannelFrames {
  private static final int MAX_REPLY_BYTES = 1 << 20;

  private ChannelFrames() {}

  /** A REPLY status in words (for logs). */
  static String statusName(int status) {
    return switch (status) {
      case FrameCodec.STATUS_ACCEPTED -> "accepted";
      case FrameCodec.STATUS_REPLICATED -> "replicated";
      case FrameCodec.STATUS_NOT_REPLICATED -> "not replicated in time";
      case FrameCodec.STATUS_REFUSED -> "refused";
      default -> "unknown status " + status;
    };
  }

  /** The COMMITTED frame, length prefix included. */
  static ByteBuffer committed(String storeId, String checkpointDir, long version, boolean sync,
      boolean rewritesHistory, byte[] increment) {
    return FrameCodec.encode(
        new FrameCodec.Committed(storeId, checkpointDir, version, sync, rewritesHistory, increment));
  }

  /** The RELEASED frame (the provider unloaded the store partition), length prefix included. */
  static ByteBuffer released(String storeId, String checkpointDir) {
    return FrameCodec.encode(new FrameCodec.Released(storeId, checkpointDir));
  }

  /** The MATERIALIZE frame: a RocksDB checkpoint of the node's copy at version {@code version} or below into
   * {@code targetDir}; {@code allowPeer}: the node may fetch it from a peer when it holds none itself. */
  static ByteBuffer materialize(String storeId, String checkpointDir, long version, String targetDir,
      boolean allowPeer, long deadlineMs) {
    return FrameCodec.encode(
        new FrameCodec.Materialize(storeId, checkpointDir, version, targetDir, allowPeer, deadlineMs));
  }

  /** The LOAD frame: what the batch that committed {@code version} cost its executor (load balancing). */
  static ByteBuffer load(String storeId, String checkpointDir, long version, long taskMillis, long rowsWritten,
      long stateBytes, int executorCores) {
    return FrameCodec.encode(new FrameCodec.Load(storeId, checkpointDir, version, Math.min(taskMillis, 0xFFFFFFFFL),
        rowsWritten, stateBytes, Math.min(executorCores, 0xFFFF)));
  }

  /** The INCOMING frame: which partitions a running hand-over moves to this node (no fields). */
  static ByteBuffer incoming() {
    return FrameCodec.encode(new FrameCodec.IncomingRequest());
  }

  /** Reads the INCOMING_LIST frame answering an INCOMING (blocking). */
  static java.util.List<FrameCodec.Incoming> readIncomingList(SocketChannel channel) throws IOException {
    return FrameCodec.decodeIncomingList(readFrame(channel, FrameCodec.INCOMING_LIST)).entries();
  }

  /** Who runs a partition's task, in Spark's terms: what the driver needs to steer the partition's next task. */
  record SparkPlace(String runId, String stateRoot, String executorId, String executorHost) {}

  /** The PROMOTE frame: the provider loaded {@code version} to write it. {@code load} is how it last loaded the
   * partition from somewhere else than its own directory (or this load, when there is none). */
  static ByteBuffer promote(String storeId, String checkpointDir, long version, byte[] lineage,
      StateLoader.Loaded load, long loadVersion, SparkPlace place) {
    return FrameCodec.encode(new FrameCodec.Promote(storeId, checkpointDir, version, lineage, load.source().code,
        loadVersion, load.fromVersion(), Math.min(load.millis(), 0xFFFFFFFFL), place.runId(), place.stateRoot(),
        place.executorId(), place.executorHost()));
  }

  /** The DEMOTE frame: the provider unloaded the store; its closed local directory is the node's to adopt. */
  static ByteBuffer demote(String storeId, String checkpointDir, long version, byte[] lineage, String dir) {
    return FrameCodec.encode(new FrameCodec.Demote(storeId, checkpointDir, version, lineage, dir));
  }

  /** Reads the MATERIALIZED frame answering a MATERIALIZE (blocking). */
  static FrameCodec.Materialized readMaterialized(SocketChannel channel) throws IOException {
    return FrameCodec.decodeMaterialized(readFrame(channel, FrameCodec.MATERIALIZED));
  }

  /** Whether a MATERIALIZED answer says the copy is in the target directory. */
  static boolean written(FrameCodec.Materialized answer) {
    return answer.status() == FrameCodec.MATERIALIZED_OK;
  }

  /** Reads one REPLY frame (blocking). */
  static FrameCodec.Reply readReply(SocketChannel channel) throws IOException {
    return FrameCodec.decodeReply(readFrame(channel, FrameCodec.REPLY));
  }

  private static ByteBuffer readFrame(SocketChannel channel, byte expected) throws IOException {
    ByteBuffer header = readExactly(channel, 4);
    int length = header.getInt();
    if (length < 2 || length > MAX_REPLY_BYTES) throw new IOException("bad frame length " + length);
    ByteBuffer body = readExactly(channel, length);
    byte type = body.get();
    if (type == FrameCodec.REPLY && expected != FrameCodec.REPLY) {
      FrameCodec.Reply reply = FrameCodec.decodeReply(body);
      throw new IOException("the state node answered status " + reply.status() + ": " + reply.message());
    }
    if (type != expected) throw new IOException("expected a frame of type " + expected + ", got type " + type);
    return body;
  }

  private static ByteBuffer readExactly(SocketChannel channel, int n) throws IOException {
    ByteBuffer buf = ByteBuffer.allocate(n);
    while (buf.hasRemaining()) {
      if (channel.read(buf) < 0) throw new EOFException("the state node closed the local channel");
    }
    return buf.flip();
  }
}
