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
 * sends COMMITTED frames in commit order and reads each REPLY, so a commit waits only in sync mode. A sync
 * COMMITTED is sent on a connection of its own ({@link #dispatchSync}): one partition's wait for its replica's ack
 * holds up no other partition's frames.
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

  /** Threads that hand sync commits to the node, each on its own connection (one per partition waiting). */
  private static final java.util.concurrent.ExecutorService SYNC_SENDERS = Executors.newCachedThreadPool(r -> {
    Thread t = new Thread(r, "statestore-local-channel-sync");
    t.setDaemon(true);
    return t;
  });

  /** Increment bytes waiting for the sender beyond which new asynchronous ones are dropped (replicas pull them);
   * the system property is for tests, which need a backlog without hundreds of MiB. */
  static final long MAX_QUEUED_BYTES = Long.getLong("statestore.localChannel.maxQueuedBytes", 256L << 20);
  /** How long a sidecar may take to listen on its socket. */
  static final long NODE_START_TIMEOUT_MS = 30_000;
  /** Bound of one request: an asynchronous COMMITTED is answered once verified and queued. */
  static final long ASYNC_REPLY_TIMEOUT_MS = 30_000;
  /** Bound of a sync commit's wait: the node's own sync timeout (10 s) plus a sidecar start. */
  static final long SYNC_WAIT_MS = 45_000;
  /** A sync commit that waited this long for its ack is logged with the wait (the fault suite bounds it). */
  static final long SLOW_SYNC_MS = 2_000;
  /** Longest Unix socket path Linux accepts: {@code sun_path} holds 108 bytes with the terminating NUL. */
  // Linux takes 107 bytes of path, but the JDK refuses to connect to one of 107 ("Unix domain path too long").
  static final int MAX_SOCKET_PATH_BYTES = 106;
  /** File name of the sidecar's socket in its data dir, when the path fits. */
  static final String SOCKET_NAME = "node.sock";

  /**
   * A frame for the sender thread: a COMMITTED ({@code notice} false: it may start the sidecar), or a notice
   * (PROMOTE, DEMOTE, RELEASED: only for a node that listens already). {@code bytes} counts toward the backlog
   * bound; {@code cleanup}, if set, is deleted once the node answered (or could not be reached): a directory
   * handed over by DEMOTE is gone from there when the node adopted it.
   */
  private record Pending(String what, String storeId, String checkpointDir, long version, ByteBuffer frame, int bytes,
      boolean sync, boolean notice, NodeSidecar.Spec spec, CompletableFuture<FrameCodec.Reply> done, File cleanup) {}

  private final File socket;
  private final NodeSidecar sidecar;
  private final LinkedBlockingQueue<Pending> queue = new LinkedBlockingQueue<>();
  private final AtomicLong queuedBytes = new AtomicLong();
  private final AtomicLong dropped = new AtomicLong();
  private SocketChannel connection; // sender thread only
  private volatile Pending sending; // the frame the sender thread is handing over now
  private volatile long connections;
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
    return new NodeSidecar.Spec(python(), executorId(), executorHost(), localMaster(), settings.nodePort,
        settings.controller, settings.warmUpMbPerSecond, settings.nodeMemoryBudgetMb, settings.nodeMaxOpenReplicas,
        settings.secret,
        tlsEnvironment(settings), ReplicaFiles.hostDir(sparkConf("spark.hadoop." + ReplicaFiles.DIR_KEY)).getPath());
  }

  /** The environment that gives a sidecar (node or controller) the settings' TLS files (statestore.tls). */
  static java.util.Map<String, String> tlsEnvironment(ProviderSettings settings) {
    java.util.Map<String, String> tls = new java.util.TreeMap<>();
    if (settings.tlsCert != null) tls.put("STATESTORE_TLS_CERT", settings.tlsCert);
    if (settings.tlsKey != null) tls.put("STATESTORE_TLS_KEY", settings.tlsKey);
    if (settings.tlsCa != null) tls.put("STATESTORE_TLS_CA", settings.tlsCa);
    return tls;
  }

  /** A Spark conf of this JVM's SparkEnv, or null when unset or outside Spark. */
  private static String sparkConf(String key) {
    SparkEnv env = SparkEnv.get();
    return env == null || !env.conf().contains(key) ? null : env.conf().get(key);
  }

  static String executorId() {
    SparkEnv env = SparkEnv.get();
    return env == null ? "driver" : env.executorId();
  }

  /** Whether every executor runs on this machine: Spark's master is {@code local[...]} or {@code local-cluster[...]}. */
  static boolean localMaster() {
    SparkEnv env = SparkEnv.get();
    String master = env == null ? "local" : env.conf().get("spark.master", "local");
    return master.startsWith("local");
  }

  /** The executor's host as Spark's scheduler names it (its block manager's), or "" outside an executor. */
  static String executorHost() {
    SparkEnv env = SparkEnv.get();
    if (env == null || env.blockManager() == null || env.blockManager().blockManagerId() == null) return "";
    return env.blockManager().blockManagerId().host();
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
   * Hands the increment of a committed version to the node: queued, in commit order, returns at once. In sync mode
   * the caller then waits for the node's answer with {@link #awaitSync}, without holding its provider's monitor.
   * Past {@link #MAX_QUEUED_BYTES} of backlog an asynchronous commit is not queued (replicas pull it); a sync commit
   * always is: its caller waits for a replica's ack, and dropping it would turn it asynchronous unseen.
   */
  CompletableFuture<FrameCodec.Reply> committed(String storeId, String checkpointDir, long version,
      boolean rewritesHistory, byte[] increment, boolean sync, NodeSidecar.Spec spec) {
    Pending p = new Pending("version " + version, storeId, checkpointDir, version,
        ChannelFrames.committed(storeId, checkpointDir, version, sync, rewritesHistory, increment), increment.length,
        sync, false, spec, new CompletableFuture<>(), null);
    if (queuedBytes.addAndGet(increment.length) > MAX_QUEUED_BYTES && !queue.isEmpty() && !sync) {
      queuedBytes.addAndGet(-increment.length);
      long n = dropped.incrementAndGet();
      if (n == 1 || n % 100 == 0) {
        LOG.warn("statestore: local channel backlog over {} bytes: version {} of {} not handed to the node "
            + "({} dropped so far; replicas pull them)", MAX_QUEUED_BYTES, version, storeId, n);
      }
      return CompletableFuture.completedFuture(null);
    }
    queue.add(p);
    return p.done;
  }

  /**
   * Waits for a sync commit's answer (a replica acked, or the node's sync timeout passed), at most
   * {@link #SYNC_WAIT_MS}; logs when the version was not replicated.
   */
  static void awaitSync(CompletableFuture<FrameCodec.Reply> answer, String storeId, long version) {
    long started = System.nanoTime();
    try {
      FrameCodec.Reply reply = answer.get(SYNC_WAIT_MS, TimeUnit.MILLISECONDS);
      if (reply == null) {
        LOG.warn("statestore: sync commit of {} version {}: the state node could not be reached", storeId, version);
      } else if (reply.status() != FrameCodec.STATUS_REPLICATED) {
        LOG.warn("statestore: sync commit of {} version {}: {} ({})", storeId, version, ChannelFrames.statusName(reply.status()),
            reply.message());
      }
    } catch (TimeoutException e) {
      LOG.warn("statestore: sync commit of {} version {}: no answer from the state node within {} ms", storeId,
          version, SYNC_WAIT_MS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (java.util.concurrent.ExecutionException e) {
      LOG.warn("statestore: sync commit of {} version {} failed: {}", storeId, version, e.getCause().toString());
    } finally {
      long waited = (System.nanoTime() - started) / 1_000_000;
      if (waited >= SLOW_SYNC_MS) {
        LOG.warn("statestore: sync commit of {} version {} waited {} ms for a replica's ack", storeId, version,
            waited);
      }
    }
  }

  /**
   * Tells the node, after the commits queued before it, that this JVM unloaded the store partition (Spark
   * closed its provider: the query stopped, or the task runs elsewhere now), so the node stops being its
   * primary. Returns at once; no sidecar is started for it.
   */
  void released(String storeId, String checkpointDir, NodeSidecar.Spec spec) {
    notice("release", storeId, checkpointDir, 0, ChannelFrames.released(storeId, checkpointDir), spec, null);
  }

  /**
   * Tells the node, in commit order, that this JVM loaded version {@code version} of the partition to write it
   * (Spark runs its task here now): the node becomes its primary, and reports where the state came from.
   */
  void promoted(String storeId, String checkpointDir, long version, byte[] lineage, StateLoader.Loaded load,
      long loadVersion, ChannelFrames.SparkPlace place, NodeSidecar.Spec spec) {
    notice("promotion", storeId, checkpointDir, version,
        ChannelFrames.promote(storeId, checkpointDir, version, lineage, load, loadVersion, place), spec, null);
  }

  /**
   * Tells the node, after what was queued before, that this host kept a copy of one of the partition's state files
   * (Spark's own RocksDB provider under the checkpoint file layer, {@link FileShipping}); the node ships it to the
   * partition's replica group.
   */
  void fileKept(FrameCodec.FileKept kept, NodeSidecar.Spec spec) {
    notice("file copy", kept.storeId(), kept.checkpointDir(), kept.version(), FrameCodec.encode(kept), spec, null);
  }

  /** Tells the node what a load read of one of the partition's state files, and from where ({@link FileShipping}). */
  void fileRead(FrameCodec.FileRead read, NodeSidecar.Spec spec) {
    notice("file read", read.storeId(), read.checkpointDir(), read.version(), FrameCodec.encode(read), spec, null);
  }

  /** What the batch that committed {@code version} cost its executor (LOAD), after that version's COMMITTED. */
  void load(String storeId, String checkpointDir, long version, long taskMillis, long rowsWritten, long stateBytes,
      int executorCores, NodeSidecar.Spec spec) {
    notice("load report", storeId, checkpointDir, version,
        ChannelFrames.load(storeId, checkpointDir, version, taskMillis, rowsWritten, stateBytes, executorCores), spec,
        null);
  }

  /** How many connections the sender opened so far: a new one means the node may have restarted (and forgotten
   * what it was told). */
  long connections() {
    return connections;
  }

  /**
   * Hands the node the closed local directory {@code dir} of an unloaded partition, at {@code version} with
   * {@code lineage}, to adopt as a replica (formats.md section 6); the node stops being its primary. The
   * directory is deleted if the node does not take it.
   */
  void demoted(String storeId, String checkpointDir, long version, byte[] lineage, File dir, NodeSidecar.Spec spec) {
    notice("demotion", storeId, checkpointDir, version,
        ChannelFrames.demote(storeId, checkpointDir, version, lineage, dir.getAbsolutePath()), spec, dir);
  }

  private void notice(String what, String storeId, String checkpointDir, long version, ByteBuffer frame,
      NodeSidecar.Spec spec, File cleanup) {
    queue.add(new Pending(what, storeId, checkpointDir, version, frame, 0, false, true, spec, new CompletableFuture<>(),
        cleanup));
  }

  /**
   * Starts this JVM's sidecar node now if nothing listens at its socket yet (an executor starting up: its node
   * takes replicas before the executor runs any stateful task). No-op for a node run as a service.
   */
  void startNode(NodeSidecar.Spec spec) throws IOException {
    if (sidecar == null) return;
    try {
      open().close();
    } catch (IOException notListening) {
      sidecar.start(spec);
    }
  }

  /**
   * Asks the node for its copy of the partition at {@code version} or below, as a RocksDB checkpoint written to
   * {@code targetDir}; waits at most {@code timeoutMs}. On its own connection (the node answers each connection
   * in its own thread), so it does not wait behind queued commits; no sidecar is started for it: a node that is
   * not up holds nothing. Throws IOException when no node listens or it does not answer in time.
   */
  FrameCodec.Materialized materialize(String storeId, String checkpointDir, long version, File targetDir,
      boolean allowPeer, long timeoutMs) throws IOException {
    awaitHandOversOf(storeId, checkpointDir, timeoutMs);
    ByteBuffer frame = ChannelFrames.materialize(storeId, checkpointDir, version, targetDir.getAbsolutePath(),
        allowPeer, timeoutMs);
    return ask(frame, timeoutMs, ChannelFrames::readMaterialized);
  }

  /** The partitions a running hand-over moves to this node (INCOMING), on a connection of its own like
   * {@link #materialize}; throws IOException when no node listens or it does not answer in time. */
  java.util.List<FrameCodec.Incoming> incoming(long timeoutMs) throws IOException {
    return ask(ChannelFrames.incoming(), timeoutMs, ChannelFrames::readIncomingList);
  }

  /** Asks the node to fetch a partition's state files from a peer holding them ({@code fetch}, FETCH_FILES), on a
   * connection of its own like {@link #materialize}; waits at most {@code fetch.timeoutMs()} and a second. Throws
   * IOException when no node listens or it does not answer in time. */
  FrameCodec.Reply fetchFiles(FrameCodec.FetchFiles fetch) throws IOException {
    return ask(FrameCodec.encode(fetch), fetch.timeoutMs() + 1000, ChannelFrames::readReply);
  }

  /** How a request's answer frame is read off the connection. */
  @FunctionalInterface
  private interface AnswerReader<T> {
    T read(SocketChannel channel) throws IOException;
  }

  /** Sends {@code frame} on a connection of its own and reads its answer, within {@code timeoutMs}. */
  private <T> T ask(ByteBuffer frame, long timeoutMs, AnswerReader<T> reader) throws IOException {
    try (SocketChannel c = open()) {
      ScheduledFuture<?> deadline = DEADLINES.schedule(() -> closeQuietly(c), timeoutMs, TimeUnit.MILLISECONDS);
      try {
        while (frame.hasRemaining()) c.write(frame);
        return reader.read(c);
      } catch (java.nio.channels.AsynchronousCloseException e) {
        throw new IOException("the state node at " + socket + " did not answer within " + timeoutMs + " ms", e);
      } finally {
        deadline.cancel(false);
      }
    }
  }

  /**
   * Waits (up to {@code timeoutMs}) until the DEMOTE and RELEASED notices of the store partition ({@code storeId}
   * at {@code checkpointDir}) queued or being sent have reached the node: a provider of this JVM that Spark just
   * closed hands the node its store, and a load of the same partition asking the node for its copy must find it
   * adopted, not the node still its primary. Matched by the whole identity: every query repeats store ids, and a
   * load must not wait behind another query's notices.
   */
  private void awaitHandOversOf(String storeId, String checkpointDir, long timeoutMs) {
    java.util.List<CompletableFuture<FrameCodec.Reply>> waits = new java.util.ArrayList<>();
    Pending current = sending;
    if (current != null && isHandOverOf(current, storeId, checkpointDir)) waits.add(current.done());
    for (Pending p : queue) {
      if (isHandOverOf(p, storeId, checkpointDir)) waits.add(p.done());
    }
    if (waits.isEmpty()) return;
    try {
      CompletableFuture.allOf(waits.toArray(new CompletableFuture[0])).get(timeoutMs, TimeUnit.MILLISECONDS);
    } catch (Exception e) {
      LOG.info("statestore: materialize of {} goes ahead before the node heard of its hand-over: {}", storeId,
          e.toString());
    }
  }

  private static boolean isHandOverOf(Pending p, String storeId, String checkpointDir) {
    return p.notice() && p.storeId().equals(storeId)
        && normalizedDir(p.checkpointDir()).equals(normalizedDir(checkpointDir))
        && ("demotion".equals(p.what()) || "release".equals(p.what()));
  }

  /** A checkpoint location as the node keys it: a {@code file:} URI as its local path, no trailing slash (the
   * provider names it as Hadoop does, an INCOMING entry as the node does). */
  static String normalizedDir(String dir) {
    String path = dir;
    if (dir.startsWith("file:")) {
      try {
        path = new java.net.URI(dir).getPath();
      } catch (java.net.URISyntaxException e) {
        path = dir.substring("file:".length());
      }
    }
    while (path.length() > 1 && path.endsWith("/")) path = path.substring(0, path.length() - 1);
    return path;
  }

  private void run() {
    while (true) {
      Pending p;
      try {
        p = queue.take();
      } catch (InterruptedException e) {
        return;
      }
      sending = p;
      queuedBytes.addAndGet(-p.bytes());
      if (p.sync() && !p.notice() && dispatchSync(p)) {
        sending = null;
        continue;
      }
      FrameCodec.Reply reply = null;
      try {
        reply = send(p);
        if (failures > 0) LOG.info("statestore: local channel to {} works again after {} failures", socket, failures);
        failures = 0;
        if (reply.status() == FrameCodec.STATUS_REFUSED) {
          LOG.warn("statestore: state node refused the {} of {}: {}", p.what(), p.storeId(), reply.message());
        }
      } catch (IOException | RuntimeException e) {
        closeConnection();
        failures++;
        if (failures == 1 || failures % 100 == 0) {
          LOG.warn("statestore: the {} of {} not handed to the state node at {} ({} failures in a row; the "
              + "query goes on, replicas pull what they miss): {}", p.what(), p.storeId(), socket, failures,
              e.toString());
        }
      } finally {
        if (p.cleanup() != null) LocalDirs.deleteRecursively(p.cleanup());
      }
      sending = null;
      p.done().complete(reply);
    }
  }

  /**
   * A sync COMMITTED goes on a connection of its own, written and answered on a thread of {@link #SYNC_SENDERS},
   * so that the frames queued after it (other partitions' commits and notices) do not wait behind its replica's
   * ack, up to the node's sync timeout (the node answers each connection in its own thread). Its partition sends
   * nothing more before the answer: the commit returns only then, and its LOAD report is queued after it. The node
   * must be up (this thread connects, starting the sidecar if need be); false when it is not, and the frame then
   * takes the ordinary path, which reports why.
   */
  private boolean dispatchSync(Pending p) {
    if (sidecar != null && sidecar.runsOtherThan(p.spec())) return false;
    SocketChannel own;
    try {
      if (connection == null) connection = connect(p.spec());
      own = open();
    } catch (IOException | RuntimeException e) {
      return false;
    }
    SYNC_SENDERS.execute(() -> {
      FrameCodec.Reply reply = null;
      ScheduledFuture<?> deadline = DEADLINES.schedule(() -> closeQuietly(own), SYNC_WAIT_MS, TimeUnit.MILLISECONDS);
      try {
        ByteBuffer frame = p.frame();
        while (frame.hasRemaining()) own.write(frame);
        reply = ChannelFrames.readReply(own);
        if (reply.status() == FrameCodec.STATUS_REFUSED) {
          LOG.warn("statestore: state node refused the {} of {}: {}", p.what(), p.storeId(), reply.message());
        }
      } catch (IOException | RuntimeException e) {
        LOG.warn("statestore: the sync {} of {} not answered by the state node at {}: {}", p.what(), p.storeId(),
            socket, e.toString());
      } finally {
        deadline.cancel(false);
        closeQuietly(own);
        p.done().complete(reply);
      }
    });
    return true;
  }

  private FrameCodec.Reply send(Pending p) throws IOException {
    if (p.notice()) return sendNotice(p);
    if (sidecar != null && sidecar.runsOtherThan(p.spec())) {
      // Another application in this JVM (local mode): its node starts afresh, on an empty data dir.
      LOG.info("statestore: restarting the state node at {} for controller {}", socket, p.spec().controller());
      closeConnection();
      sidecar.stop();
    }
    if (connection == null) connection = connect(p.spec());
    return exchange(p.frame(), p.sync() ? SYNC_WAIT_MS : ASYNC_REPLY_TIMEOUT_MS);
  }

  /** A notice (PROMOTE, DEMOTE, RELEASED), only to a node that listens already: one that is not up holds nothing
   * to promote, adopt or release (a sidecar started later learns of the partition at its first commit). */
  private FrameCodec.Reply sendNotice(Pending p) throws IOException {
    if (sidecar != null && sidecar.runsOtherThan(p.spec())) {
      return new FrameCodec.Reply(FrameCodec.STATUS_ACCEPTED, "the node serves another application");
    }
    if (connection == null) {
      try {
        connection = openForSender();
      } catch (IOException notListening) {
        return new FrameCodec.Reply(FrameCodec.STATUS_ACCEPTED, "no node listens: nothing to tell");
      }
    }
    return exchange(p.frame(), ASYNC_REPLY_TIMEOUT_MS);
  }

  private FrameCodec.Reply exchange(ByteBuffer frame, long timeout) throws IOException {
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
      return openForSender();
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
        return openForSender();
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

  /** A connection for the sender thread, counted. */
  private SocketChannel openForSender() throws IOException {
    SocketChannel c = open();
    connections++;
    return c;
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
