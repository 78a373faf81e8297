package io.statestore.spark;

import java.io.File;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The state node this JVM starts beside itself when nothing listens at its local socket (formats.md
 * section 6): {@code <python> -m statestore.cli node --local-socket ... --parent-pid <this JVM>}.
 *
 * <p>The node is a child of the executor: it exits when this JVM's process is gone (it watches the pid we
 * pass), so it never outlives its executor; a user who wants a node that does run it as a service and
 * sets {@code nodeSocket}. At most one sidecar of ours runs per socket; a dead one is started again on a
 * later commit, no sooner than {@link #RESTART_INTERVAL_MS} after the previous start, on the same data dir
 * (it reopens its replicas and catches up).
 *
 * <p>The data dir belongs to this JVM (inside {@link LocalDirs#jvmDir}, see {@link LocalChannel}): no other
 * JVM uses it, and it is deleted at the next start-up on the same local dir after this JVM is gone. Within
 * this JVM, a start for another spec than the previous one (another controller: a new Spark application in
 * a {@code local}-mode JVM) first empties it, so a node never reopens another application's replicas.
 */
final class NodeSidecar {
  private static final Logger LOG = LoggerFactory.getLogger(NodeSidecar.class);
  static final long RESTART_INTERVAL_MS = 5_000;
  /** With a set node port, the further ports tried when it is taken (as Spark's {@code spark.port.maxRetries}). */
  static final int PORT_RETRIES = 16;

  /** How to start the node: interpreter, identity and controller, from the provider's settings. */
  record Spec(String python, String executorId, String executorHost, boolean localMaster, int port,
      String controller, double warmUpMbPerSecond, long memoryBudgetMb, long maxOpenReplicas, String secret,
      java.util.Map<String, String> tlsEnvironment, String replicaFilesDir) {
    /** Without the secret, which never goes to a log. */
    @Override
    public String toString() {
      return "Spec[python=" + python + ", executorId=" + executorId + ", executorHost=" + executorHost
          + ", localMaster=" + localMaster + ", port=" + port + ", controller=" + controller + ", warmUpMbPerSecond="
          + warmUpMbPerSecond + ", memoryBudgetMb=" + memoryBudgetMb + ", maxOpenReplicas=" + maxOpenReplicas
          + ", replicaFilesDir=" + replicaFilesDir + "]";
    }
  }

  private final File socket;
  private final File dataDir;
  private Process process;
  private Spec running;
  /** The spec of the last start, kept after the node stopped or died: whose replicas the data dir holds. */
  private Spec started;
  private long lastStartMs;

  NodeSidecar(File socket, File dataDir) {
    this.socket = socket;
    this.dataDir = dataDir;
  }

  /** Whether a sidecar we started still runs. */
  synchronized boolean alive() {
    return process != null && process.isAlive();
  }

  /** Whether ours runs with another spec (another controller: a new Spark application in this JVM). */
  synchronized boolean runsOtherThan(Spec spec) {
    return alive() && !spec.equals(running);
  }

  /**
   * Starts the node unless one of ours runs or, for the same spec, the last start was too recent; returns
   * whether it started. A start for another spec than the last one begins on an empty data dir.
   */
  synchronized boolean start(Spec spec) throws IOException {
    if (alive()) return false;
    if (!LocalChannel.socketPathFits(socket)) {
      throw new IOException("local socket path " + socket + " is too long (" + LocalChannel.pathBytes(socket)
          + " bytes, at most " + LocalChannel.MAX_SOCKET_PATH_BYTES + ")");
    }
    long now = System.currentTimeMillis();
    boolean sameSpec = spec.equals(started);
    if (sameSpec && now - lastStartMs < RESTART_INTERVAL_MS) return false;
    if (started != null && !sameSpec) {
      LocalDirs.deleteRecursively(dataDir);
      if (dataDir.exists()) throw new IOException("cannot empty " + dataDir + " for the state node of " + spec);
      LOG.info("statestore: emptied {}: it held the state node of controller {}, the new one is for {}", dataDir,
          started.controller(), spec.controller());
    }
    lastStartMs = now;
    started = spec;
    if (!dataDir.isDirectory() && !dataDir.mkdirs()) throw new IOException("cannot create " + dataDir);
    List<String> cmd = new ArrayList<>(List.of(spec.python(), "-m", "statestore.cli", "node",
        "--local-socket", socket.getPath(), "--data-dir", dataDir.getPath(), "--listen", listenAddress(spec),
        "--node-id", spec.executorId(), "--parent-pid", Long.toString(ProcessHandle.current().pid())));
    if (spec.port() != 0) {
      cmd.add("--port-retries");
      cmd.add(Integer.toString(PORT_RETRIES));
    }
    if (!spec.executorHost().isEmpty()) {
      cmd.add("--executor-host");
      cmd.add(spec.executorHost());
    }
    cmd.add("--bootstrap-mb-per-second");
    cmd.add(Double.toString(spec.warmUpMbPerSecond()));
    cmd.add("--memory-budget-mb");
    cmd.add(Long.toString(spec.memoryBudgetMb()));
    cmd.add("--max-open-replicas");
    cmd.add(Long.toString(spec.maxOpenReplicas()));
    if (spec.replicaFilesDir() != null) {
      cmd.add("--replica-files-dir");
      cmd.add(spec.replicaFilesDir());
    }
    if (spec.controller() != null) {
      cmd.add("--controller");
      cmd.add(spec.controller());
    }
    ProcessBuilder builder = new ProcessBuilder(cmd).directory(dataDir).redirectErrorStream(true)
        .redirectOutput(ProcessBuilder.Redirect.appendTo(logFile()));
    builder.environment().put("PYTHONUNBUFFERED", "1");
    // The application's secret (statestore.auth) in the environment: a command line is readable by every user.
    if (spec.secret() != null && !spec.secret().isEmpty()) {
      builder.environment().put("STATESTORE_SECRET", spec.secret());
    }
    builder.environment().putAll(spec.tlsEnvironment());
    process = builder.start();
    running = spec;
    LOG.info("statestore: started state node {} (pid {}) for executor {} at {}, log {}", spec.python(),
        process.pid(), spec.executorId(), socket, logFile());
    return true;
  }

  /** Stops our sidecar: SIGTERM (the node shuts down gracefully), then SIGKILL after a few seconds. */
  synchronized void stop() {
    if (process == null) return;
    process.destroy();
    try {
      if (!process.waitFor(8, TimeUnit.SECONDS)) process.destroyForcibly().waitFor(5, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    process = null;
    running = null;
  }

  /**
   * Where the node listens: loopback when every executor runs on this machine (a {@code local} or
   * {@code local-cluster} master, or no executor host known), else the executor's host as Spark's block
   * manager reports it, so that nodes on other hosts reach it there and nowhere else (never every interface
   * unasked); at the {@code nodePort} setting (trying the next {@link #PORT_RETRIES} if taken), else any free
   * port. The node advertises the address it bound.
   */
  static String listenAddress(Spec spec) {
    String host = spec.localMaster() || spec.executorHost().isEmpty() ? "127.0.0.1" : spec.executorHost();
    return (host.contains(":") ? "[" + host + "]:" : host + ":") + spec.port();
  }

  File logFile() {
    return new File(dataDir, "node.log");
  }

  /** The last few lines of the node's log, to say why it did not start. */
  String logTail() {
    try (RandomAccessFile f = new RandomAccessFile(logFile(), "r")) {
      long from = Math.max(0, f.length() - 2000);
      byte[] buf = new byte[(int) (f.length() - from)];
      f.seek(from);
      f.readFully(buf);
      return new String(buf, StandardCharsets.UTF_8).trim();
    } catch (IOException e) {
      return "(no log: " + e.getMessage() + ")";
    }
  }
}
