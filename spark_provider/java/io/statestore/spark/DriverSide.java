package io.statestore.spark;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkContext;
import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The plugin's driver side: with replication on and no {@code controller} setting (an application submitted with
 * {@code spark-submit --conf}, a Spark Connect server, any driver without {@code enable()}), it starts the replica
 * groups' controller as a sidecar process of this JVM, before any executor starts, and puts its address (and, when
 * none is set, a new secret) into the application's confs, where executors, their nodes and every session read
 * them. It then links the controller to Spark ({@link DriverLink}): executor removals and decommissions go to the
 * controller, which steers Spark's {@code StateStoreCoordinator} through it.
 *
 * <p>The controller is a child of this JVM: it exits when the JVM's process is gone, whatever ended it (it watches
 * the pid), and the plugin stops it at {@link #shutdown}. If it dies meanwhile, it is started again on the same
 * address; it learns the cluster again from the nodes' heartbeats.
 */
public final class DriverSide implements DriverPlugin {
  private static final Logger LOG = LoggerFactory.getLogger(DriverSide.class);
  private static final long START_TIMEOUT_MS = 60_000;
  private static final long RESTART_INTERVAL_MS = 2_000;
  /** Beside the faults file: the fault the controller's inbound proxy applies (fault suite only). */
  static final String CONTROLLER_LINKS_SUFFIX = ".controller-links";

  private volatile boolean stopping;
  private SparkConf conf;
  private Process process;
  private List<String> command;
  private File dir;
  private DriverLink link;
  private Thread keeper;

  @Override
  public Map<String, String> init(SparkContext sc, PluginContext context) {
    start(sc);
    return Map.of();
  }

  /**
   * For a SparkContext that started without the plugin ({@code spark_provider.enable()} given a running session):
   * starts the controller as {@link #init} does and stops it when the application ends. Returns the controller's
   * address, or null when none is started (replication off, or a {@code controller} setting names one).
   */
  public static String attach(SparkContext sc) {
    DriverSide side = new DriverSide();
    String address = side.start(sc);
    if (address != null) {
      sc.addSparkListener(new org.apache.spark.scheduler.SparkListener() {
        @Override
        public void onApplicationEnd(org.apache.spark.scheduler.SparkListenerApplicationEnd end) {
          side.shutdown();
        }
      });
    }
    return address;
  }

  /** Starts the controller for this application and returns its address (null: none to start). */
  private String start(SparkContext sc) {
    conf = sc.conf();
    ProviderSettings settings = ProviderSettings.from(conf);
    if (settings.replicationFactor == 0 || settings.controller != null) return null; // none, or the user's
    boolean local = sc.master().startsWith("local");
    String advertise = local ? "127.0.0.1" : conf.get("spark.driver.host", "127.0.0.1");
    String listen = local ? "127.0.0.1" : conf.get("spark.driver.bindAddress", advertise);
    String secret = settings.secret;
    if (secret == null) {
      secret = conf.get("spark.authenticate.secret", "");
      if (secret.isEmpty()) secret = newSecret();
      conf.set(ProviderSettings.PREFIX + "secret", secret);
    }
    try {
      dir = Files.createTempDirectory("statestore-driver-",
          PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------"))).toFile();
      command = commandOn(hostPort(listen, controllerPort(conf)), settings.replicationFactor, sc.appName());
      int port = launch();
      command = commandOn(hostPort(listen, port), settings.replicationFactor, sc.appName()); // the same address
      String address = hostPort(advertise, port);
      conf.set(ProviderSettings.PREFIX + "controller", address);
      LOG.info("statestore: controller {} started for this driver (pid {}), log {}", address, process.pid(),
          logFile());
      // One line where the user looks (Spark's console shows warnings only): where the controller is.
      System.err.println("statestore: the replica groups' controller serves at " + address + " (its log: "
          + logFile() + "); `statestore status` on this host finds it");
      link = new DriverLink(new File(dir, "link.sock"), sc);
      link.start();
      keeper = new Thread(this::keepRunning, "statestore-controller-keeper");
      keeper.setDaemon(true);
      keeper.start();
      return address;
    } catch (IOException e) {
      throw new IllegalStateException("statestore: the driver could not start the replica groups' controller: "
          + e.getMessage() + ". Set spark.pyspark.python (or PYSPARK_PYTHON) to a Python that has the statestore "
          + "package, or run `statestore controller` yourself and set " + ProviderSettings.PREFIX
          + "controller=HOST:PORT (or " + ProviderSettings.PREFIX + "replicationFactor=0)", e);
    }
  }

  @Override
  public void shutdown() {
    stopping = true;
    if (link != null) link.stop();
    if (keeper != null) keeper.interrupt();
    Process running = process;
    if (running == null) return;
    running.destroy(); // SIGTERM: the controller stops serving and exits
    try {
      if (!running.waitFor(8, TimeUnit.SECONDS)) running.destroyForcibly().waitFor(5, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    // A clean stop leaves nothing behind; otherwise the directory keeps the controller's log for whoever looks.
    if (!running.isAlive() && running.exitValue() == 0) LocalDirs.deleteRecursively(dir);
    else LOG.warn("statestore: the controller did not stop cleanly; its log stays at {}", logFile());
  }

  /** Starts the controller ({@link #command} and the confs' controller options), waits until it serves, and
   * returns its port. */
  private int launch() throws IOException {
    File portFile = new File(dir, "port");
    Files.deleteIfExists(portFile.toPath());
    List<String> cmd = new ArrayList<>(command);
    for (String[] option : new String[][] {{"forgetAfterSeconds", "--forget-after"},
        {"rereplicationDelaySeconds", "--rereplication-delay"}, {"loadBalancing", "--load-balancing"},
        {"loadBalancingFactor", "--load-balancing-factor"}, {"loadBalancingBatches", "--load-balancing-batches"},
        {"loadBalancingMaxMoves", "--load-balancing-max-moves"}, {"metricsPort", "--metrics-port"}}) {
      String value = conf.get(ProviderSettings.PREFIX + option[0], null);
      if (value != null) {
        cmd.add(option[1]);
        cmd.add(value.trim());
      }
    }
    cmd.add("--port-file");
    cmd.add(portFile.getPath());
    ProcessBuilder builder = new ProcessBuilder(cmd).directory(dir).redirectErrorStream(true)
        .redirectOutput(ProcessBuilder.Redirect.appendTo(logFile()));
    builder.environment().put("PYTHONUNBUFFERED", "1");
    // The secret in the environment, never on a command line: any user reads those.
    builder.environment().put("STATESTORE_SECRET", conf.get(ProviderSettings.PREFIX + "secret"));
    builder.environment().putAll(LocalChannel.tlsEnvironment(ProviderSettings.from(conf)));
    String faults = conf.get(ProviderSettings.PREFIX + "faultsFile", "").trim();
    if (!faults.isEmpty()) {
      // The fault suite: the controller's fault points follow the application's faults file, and the nodes reach
      // it through a proxy following the file beside it (statestore.faults.link_faults).
      builder.environment().put("STATESTORE_FAULTS_FILE", faults);
      builder.environment().put("STATESTORE_LINK_FAULTS_FILE", faults + CONTROLLER_LINKS_SUFFIX);
    }
    process = builder.start();
    long deadline = System.currentTimeMillis() + START_TIMEOUT_MS;
    while (!portFile.exists()) {
      if (!process.isAlive()) {
        throw new IOException(String.join(" ", command.subList(0, 3)) + " exited with " + process.exitValue()
            + ": " + logTail());
      }
      if (System.currentTimeMillis() > deadline) {
        process.destroyForcibly();
        throw new IOException("the controller did not serve within " + START_TIMEOUT_MS / 1000 + " s: " + logTail());
      }
      try {
        Thread.sleep(50);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IOException("interrupted while the controller started");
      }
    }
    return Integer.parseInt(Files.readString(portFile.toPath()).trim());
  }

  private List<String> commandOn(String listen, int replicationFactor, String application) {
    return new ArrayList<>(List.of(python(), "-m", "statestore.cli", "controller", "--listen", listen,
        "--replication-factor", Integer.toString(replicationFactor), "--application", application,
        "--parent-pid", Long.toString(ProcessHandle.current().pid()),
        "--driver-link", new File(dir, "link.sock").getPath()));
  }

  /** Starts the controller again whenever it dies while the application runs. */
  private void keepRunning() {
    while (!stopping) {
      try {
        process.waitFor();
        if (stopping) return;
        LOG.warn("statestore: the controller exited with {}; starting it again on the same address. Its log: {}",
            process.exitValue(), logTail());
        Thread.sleep(RESTART_INTERVAL_MS);
        launch();
      } catch (InterruptedException e) {
        return;
      } catch (IOException e) {
        LOG.error("statestore: the controller could not be started again ({}); retrying", e.getMessage());
      }
    }
  }

  private static int controllerPort(SparkConf conf) {
    return ProviderSettings.controllerPort(conf);
  }

  private static String hostPort(String host, int port) {
    return (host.contains(":") ? "[" + host + "]:" : host + ":") + port;
  }

  private static String newSecret() {
    byte[] bytes = new byte[32];
    new SecureRandom().nextBytes(bytes);
    return HexFormat.of().formatHex(bytes);
  }

  /** The driver's Python, in Spark's own order (its {@code PythonRunner}): the confs naming one, else
   * PYSPARK_DRIVER_PYTHON or PYSPARK_PYTHON, else python3. {@code enable()} names the Python it runs in. */
  private String python() {
    for (String key : new String[] {"spark.pyspark.driver.python", "spark.pyspark.python"}) {
      String value = conf.get(key, "");
      if (!value.isBlank()) return value;
    }
    for (String variable : new String[] {"PYSPARK_DRIVER_PYTHON", "PYSPARK_PYTHON"}) {
      String value = System.getenv(variable);
      if (value != null && !value.isBlank()) return value;
    }
    return "python3";
  }

  /** The controller's log: STATESTORE_CONTROLLER_LOG when set (the demo's), else in its temporary directory. */
  private File logFile() {
    String chosen = System.getenv("STATESTORE_CONTROLLER_LOG");
    return chosen != null && !chosen.isBlank() ? new File(chosen) : new File(dir, "controller.log");
  }

  private String logTail() {
    try {
      byte[] all = Files.readAllBytes(logFile().toPath());
      int from = Math.max(0, all.length - 2000);
      return new String(all, from, all.length - from, StandardCharsets.UTF_8).trim();
    } catch (IOException e) {
      return "(no log: " + e.getMessage() + ")";
    }
  }
}
