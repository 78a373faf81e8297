package io.statestore.spark;

import java.io.File;
import java.io.IOException;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The provider's side of the local channel to its state node (formats.md section 6). After a commit the
 * provider hands the increment over with {@link #committed}; one sender thread per socket (so one per JVM)
 * sends COMMITTED frames in commit order and reads each REPLY, so a commit waits only in sync mode.
 *
 * <p>A dead or slow node never fails the query: the increment is already durable in the checkpoint
 * location. A failure is logged, the connection dropped, and a later commit reconnects (starting the
 * sidecar again if it died); replicas pull what they missed.
 *
 * <p>Where: a node run as a service listens at the {@code nodeSocket} setting. Otherwise this JVM starts a
 * sidecar whose data dir is {@code node-<executorId>} inside this JVM's own local directory
 * ({@link LocalDirs#jvmDir}: {@code <localDir>/<pid>-<uuid>/node-<executorId>}), so no other JVM, of this
 * application or an earlier one, ever uses it, and it is deleted with the rest of that directory at the next
 * start-up of a JVM on the same local dir once this one is gone. Its socket is {@code <dataDir>/node.sock}
 * when that path fits a Unix socket address ({@value #MAX_SOCKET_PATH_BYTES} bytes), else
 * {@code <java.io.tmpdir>/statestore-<pid>-<8 hex of the data dir's hash>.sock} (then {@code /tmp/...}).
 */
final class LocalChannel {
  private static final Logger LOG = LoggerFactory.getLogger(LocalChannel.class);
  private static final Map<File, LocalChannel> CHANNELS = new HashMap<>();
  private static final ScheduledExecutorService DEADLINES = Executors.newSingleThreadScheduledExecutor(r -> {
    Thread t = new Thread(r, "statestore-local-channel-deadline");
    t.setDaemon(true);
    return t;
  });

  /** Increment bytes waiting for the sender beyond which new ones are dropped (replicas pull them). */
  static final long MAX_QUEUED_BYTES = 256L << 20;
  /** How long a sidecar may take to listen on its socket. */
  static final long NODE_START_TIMEOUT_MS = 30_000;
  /** Bound of one request: an asynchronous COMMITTED is answered once verified and queued. */
  static final long ASYNC_REPLY_TIMEOUT_MS = 30_000;
  /** Bound of a sync commit's wait: the node's own sync timeout (10 s) plus a sidecar start. */
  static final long SYNC_WAIT_MS = 45_000;
  /** Longest Unix socket path Linux accepts: {@code sun_path} holds 108 bytes with the terminating NUL. */
  // Linux takes 107 bytes of path, but the JDK refuses to connect to one of 107 ("Unix domain path too long").
  static final int MAX_SOCKET_PATH_BYTES = 106;
  /** File name of the sidecar's socket in its data dir, when the path fits. */
  static final String SOCKET_NAME = "node.sock";

  /** A frame to send: a COMMITTED, or a RELEASED when {@code released} (then version 0, no increment). */
  private record Pending(String storeId, String checkpointDir, long version, boolean sync, boolean rewritesHistory,
      byte[] increment, NodeSidecar.Spec spec, CompletableFuture<ChannelFrames.Reply> done, boolean released) {}

  private final File socket;
  private final NodeSidecar sidecar;
  private final LinkedBlockingQueue<Pending> queue = new LinkedBlockingQueue<>();
  private final AtomicLong queuedBytes = new AtomicLong();
  private final AtomicLong dropped = new AtomicLong();
  private SocketChannel connection; // sender thread only
  private long failures; // sender thread only

  private LocalChannel(File socket, NodeSidecar sidecar) {
    this.socket = socket;
    this.sidecar = sidecar;
    Thread sender = new Thread(this::run, "statestore-local-channel");
    sender.setDaemon(true);
    sender.start();
  }

  /**
   * The channel of this JVM for {@code settings}, or null when replication is off ({@code q = 0}) or there
   * is no node to talk to (neither a service socket nor a controller for a sidecar).
   */
  static synchronized LocalChannel of(ProviderSettings settings) throws IOException {
    if (settings.replicationFactor <= 0) return null;
    if (settings.nodeSocket == null && settings.controller == null) return null;
    File socket;
    File dataDir = null;
    if (settings.nodeSocket != null) {
      socket = new File(settings.nodeSocket);
    } else {
      dataDir = sidecarDataDir(settings.localDir, executorId());
      socket = sidecarSocket(dataDir);
    }
    LocalChannel channel = CHANNELS.get(socket);
    if (channel == null) {
      NodeSidecar sidecar = null;
      if (dataDir != null) {
        sidecar = new NodeSidecar(socket, dataDir);
        File preferred = new File(dataDir, SOCKET_NAME);
        if (socket.equals(preferred)) {
          LOG.info("statestore: state node sidecar of this JVM: data dir {}, socket {}", dataDir, socket);
        } else {
          LOG.info("statestore: state node sidecar of this JVM: data dir {}, socket {} ({} would be {} bytes, "
              + "over the {} of a Unix socket path)", dataDir, socket, preferred, pathBytes(preferred),
              MAX_SOCKET_PATH_BYTES);
        }
      }
      channel = new LocalChannel(socket, sidecar);
      CHANNELS.put(socket, channel);
    }
    return channel;
  }

  /**
   * The sidecar's data dir for executor {@code executorId}: {@code node-<executorId>} in this JVM's directory
   * under {@code localRoot} (created, and the directories of dead JVMs there deleted, on first use). Absolute:
   * the node runs in it and gets it, and the socket path, as arguments.
   */
  static File sidecarDataDir(String localRoot, String executorId) throws IOException {
    return new File(LocalDirs.jvmDir(localRoot), "node-" + executorId).getAbsoluteFile();
  }

  /**
   * The sidecar's socket: {@code <dataDir>/node.sock} when it fits {@link #MAX_SOCKET_PATH_BYTES}, else a
   * short path in {@code java.io.tmpdir} (or {@code /tmp} when that is long too) named after this JVM's pid and
   * a hash of the data dir, so it is the same for the same data dir and differs between data dirs.
   */
  static File sidecarSocket(File dataDir) {
    File preferred = new File(dataDir, SOCKET_NAME);
    if (socketPathFits(preferred)) return preferred;
    String name = "statestore-" + ProcessHandle.current().pid() + "-" + shortHash(dataDir.getAbsolutePath())
        + ".sock";
    for (String dir : new String[] {System.getProperty("java.io.tmpdir"), "/tmp"}) {
      if (dir == null || dir.isEmpty()) continue;
      File candidate = new File(dir, name);
      if (socketPathFits(candidate)) return candidate;
    }
    throw new IllegalStateException("statestore: no Unix socket path of at most " + MAX_SOCKET_PATH_BYTES
        + " bytes for the state node of " + dataDir); // unreachable: /tmp/statestore-<pid>-<hash>.sock fits
  }

  /** Whether this JVM can connect to {@code socket}: at most {@link #MAX_SOCKET_PATH_BYTES} bytes of path. */
  static boolean socketPathFits(File socket) {
    return pathBytes(socket) <= MAX_SOCKET_PATH_BYTES;
  }

  static int pathBytes(File f) {
    return f.getPath().getBytes(StandardCharsets.UTF_8).length;
  }

  private static String shortHash(String s) {
    try {
      byte[] digest = MessageDigest.getInstance("SHA-256").digest(s.getBytes(StandardCharsets.UTF_8));
      return String.format("%02x%02x%02x%02x", digest[0], digest[1], digest[2], digest[3]);
    } catch (NoSuchAlgorithmException e) {
      return String.format("%08x", s.hashCode()); // every JDK has SHA-256; this only satisfies the compiler
    }
  }

  /** How this JVM starts its sidecar: the executor's Python, its id, and the controller of the settings. */
  static NodeSidecar.Spec sidecarSpec(ProviderSettings settings) {
    return new NodeSidecar.Spec(python(), executorId(), settings.controller);
  }

  private static String executorId() {
    SparkEnv env = SparkEnv.get();
    return env == null ? "driver" : env.executorId();
  }

  /** PYSPARK_PYTHON of the executor's environment, else Spark's confs naming it, else python3. */
  private static String python() {
    String fromEnv = System.getenv("PYSPARK_PYTHON");
    if (fromEnv != null && !fromEnv.isBlank()) return fromEnv;
    SparkEnv env = SparkEnv.get();
    if (env != null) {
      SparkConf conf = env.conf();
      for (String key : new String[] {"spark.executorEnv.PYSPARK_PYTHON", "spark.pyspark.python"}) {
        String value = conf.get(key, "");
        if (!value.isBlank()) return value;
      }
    }
    return "python3";
  }

  /**
   * Hands the increment of a committed version to the node. Returns at once, or in sync mode once the node
   * answered (a replica acked, or the node's sync timeout passed) or {@link #SYNC_WAIT_MS} elapsed.
   */
  void committed(String storeId, String checkpointDir, long version, boolean rewritesHistory, byte[] increment,
      boolean sync, NodeSidecar.Spec spec) {
    Pending p = new Pending(storeId, checkpointDir, version, sync, rewritesHistory, increment, spec,
        new CompletableFuture<>(), false);
    if (queuedBytes.addAndGet(increment.length) > MAX_QUEUED_BYTES && !queue.isEmpty()) {
      queuedBytes.addAndGet(-increment.length);
      long n = dropped.incrementAndGet();
      if (n == 1 || n % 100 == 0) {
        LOG.warn("statestore: local channel backlog over {} bytes: version {} of {} not handed to the node "
            + "({} dropped so far; replicas pull them)", MAX_QUEUED_BYTES, version, storeId, n);
      }
      return;
    }
    queue.add(p);
    if (!sync) return;
    try {
      ChannelFrames.Reply reply = p.done.get(SYNC_WAIT_MS, TimeUnit.MILLISECONDS);
      if (reply == null) {
        LOG.warn("statestore: sync commit of {} version {}: the state node could not be reached", storeId, version);
      } else if (reply.status() != ChannelFrames.STATUS_REPLICATED) {
        LOG.warn("statestore: sync commit of {} version {}: {} ({})", storeId, version, reply.statusName(),
            reply.message());
      }
    } catch (TimeoutException e) {
      LOG.warn("statestore: sync commit of {} version {}: no answer from the state node within {} ms", storeId,
          version, SYNC_WAIT_MS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (java.util.concurrent.ExecutionException e) {
      LOG.warn("statestore: sync commit of {} version {} failed: {}", storeId, version, e.getCause().toString());
    }
  }

  /**
   * Tells the node, after the commits queued before it, that this JVM unloaded the store partition (Spark
   * closed its provider: the query stopped, or the task runs elsewhere now), so the node stops being its
   * primary. Returns at once; no sidecar is started for it.
   */
  void released(String storeId, String checkpointDir, NodeSidecar.Spec spec) {
    queue.add(new Pending(storeId, checkpointDir, 0, false, false, new byte[0], spec, new CompletableFuture<>(),
        true));
  }

  private void run() {
    while (true) {
      Pending p;
      try {
        p = queue.take();
      } catch (InterruptedException e) {
        return;
      }
      queuedBytes.addAndGet(-p.increment().length);
      ChannelFrames.Reply reply = null;
      try {
        reply = send(p);
        if (failures > 0) LOG.info("statestore: local channel to {} works again after {} failures", socket, failures);
        failures = 0;
        if (reply.status() == ChannelFrames.STATUS_REFUSED) {
          LOG.warn("statestore: state node refused version {} of {}: {}", p.version(), p.storeId(), reply.message());
        }
      } catch (IOException | RuntimeException e) {
        closeConnection();
        failures++;
        if (failures == 1 || failures % 100 == 0) {
          LOG.warn("statestore: version {} of {} not handed to the state node at {} ({} failures in a row; the "
              + "query goes on, replicas pull what they miss): {}", p.version(), p.storeId(), socket, failures,
              e.toString());
        }
      }
      p.done().complete(reply);
    }
  }

  private ChannelFrames.Reply send(Pending p) throws IOException {
    if (p.released()) return sendReleased(p);
    if (sidecar != null && sidecar.runsOtherThan(p.spec())) {
      // Another application in this JVM (local mode): its node starts afresh, on an empty data dir.
      LOG.info("statestore: restarting the state node at {} for controller {}", socket, p.spec().controller());
      closeConnection();
      sidecar.stop();
    }
    if (connection == null) connection = connect(p.spec());
    ByteBuffer frame = ChannelFrames.committed(p.storeId(), p.checkpointDir(), p.version(), p.sync(),
        p.rewritesHistory(), p.increment());
    return exchange(frame, p.sync() ? SYNC_WAIT_MS : ASYNC_REPLY_TIMEOUT_MS);
  }

  /** A RELEASED frame, only to a node that listens already: nothing to release on a node that is not up. */
  private ChannelFrames.Reply sendReleased(Pending p) throws IOException {
    if (connection == null) {
      try {
        connection = open();
      } catch (IOException notListening) {
        return new ChannelFrames.Reply(ChannelFrames.STATUS_ACCEPTED, "no node listens: nothing to release");
      }
    }
    return exchange(ChannelFrames.released(p.storeId(), p.checkpointDir()), ASYNC_REPLY_TIMEOUT_MS);
  }

  private ChannelFrames.Reply exchange(ByteBuffer frame, long timeout) throws IOException {
    SocketChannel c = connection;
    // A blocking channel has no read timeout: closing it from another thread ends a stuck read or write.
    ScheduledFuture<?> deadline = DEADLINES.schedule(() -> closeQuietly(c), timeout, TimeUnit.MILLISECONDS);
    try {
      while (frame.hasRemaining()) c.write(frame);
      return ChannelFrames.readReply(c);
    } finally {
      deadline.cancel(false);
    }
  }

  private SocketChannel connect(NodeSidecar.Spec spec) throws IOException {
    try {
      return open();
    } catch (IOException notListening) {
      if (sidecar == null) throw new IOException("no state node listens at " + socket + ": " + notListening, notListening);
    }
    sidecar.start(spec);
    if (!sidecar.alive()) {
      throw new IOException("no state node listens at " + socket + " and its sidecar is not due for a restart yet");
    }
    long deadline = System.currentTimeMillis() + NODE_START_TIMEOUT_MS;
    while (true) {
      try {
        return open();
      } catch (IOException e) {
        if (!sidecar.alive()) throw new IOException("the state node exited; its log ends with:\n" + sidecar.logTail());
        if (System.currentTimeMillis() > deadline) {
          throw new IOException("the state node did not listen at " + socket + " within " + NODE_START_TIMEOUT_MS
              + " ms; its log: " + sidecar.logFile());
        }
        try {
          Thread.sleep(50);
        } catch (InterruptedException ie) {
          Thread.currentThread().interrupt();
          throw new IOException("interrupted while waiting for the state node", ie);
        }
      }
    }
  }

  private SocketChannel open() throws IOException {
    return SocketChannel.open(UnixDomainSocketAddress.of(socket.toPath()));
  }

  private void closeConnection() {
    if (connection != null) closeQuietly(connection);
    connection = null;
  }

  private static void closeQuietly(SocketChannel c) {
    try {
      c.close();
    } catch (IOException e) {
      // nothing to do: the channel is gone either way
    }
  }
}
