package io.statestore.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerApplicationStart;
import org.apache.spark.scheduler.SparkListenerExecutorRemoved;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The driver JVM's end of the link with the controller sidecar {@link DriverSide} started (the controller's end
 * and the messages: statestore/controller/driver_link.py). Spark's executor removals (a listener) and the
 * executors it is decommissioning (polled: Spark posts no event until they are gone) go out as events, queued
 * while the controller is restarting; the controller's steering requests come in and are answered by calling the
 * {@code StateStoreCoordinator} here ({@link Steering}).
 */
final class DriverLink {
  private static final Logger LOG = LoggerFactory.getLogger(DriverLink.class);
  private static final long POLL_MS = 500;
  private static final ObjectMapper JSON = new ObjectMapper();

  private final File socket;
  private final SparkContext sc;
  private final LinkedBlockingQueue<String> outbox = new LinkedBlockingQueue<>();
  private volatile boolean stopped;
  private volatile SocketChannel channel;
  private final Object sending = new Object();
  private String lastDecommissioning = "";
  private final java.util.concurrent.atomic.AtomicLong acks = new java.util.concurrent.atomic.AtomicLong();
  private final java.util.concurrent.ConcurrentHashMap<Long, java.util.concurrent.CountDownLatch> awaited =
      new java.util.concurrent.ConcurrentHashMap<>();
  private static volatile DriverLink current;

  DriverLink(File socket, SparkContext sc) {
    this.socket = socket;
    this.sc = sc;
  }

  /** The link of the controller this driver's plugin started (null: none). */
  static DriverLink current() {
    return current;
  }

  void start() {
    current = this;
    sc.addSparkListener(new SparkListener() {
      @Override
      public void onExecutorRemoved(SparkListenerExecutorRemoved removed) {
        ObjectNode event = JSON.createObjectNode().put("event", "executor_removed")
            .put("executor", removed.executorId()).put("reason", removed.reason());
        outbox.add(event.toString());
      }

      @Override
      public void onApplicationStart(SparkListenerApplicationStart started) {
        announceApplication();
      }
    });
    daemon(this::connectAndRead, "statestore-driver-link");
    daemon(this::sendOutbox, "statestore-driver-link-send");
    daemon(this::pollDecommissioning, "statestore-driver-decommissions");
  }

  void stop() {
    stopped = true;
    if (current == this) current = null;
    SocketChannel open = channel;
    if (open != null) {
      try {
        open.close();
      } catch (IOException e) {
        // closing anyway
      }
    }
  }

  /** Connects (again, after the controller restarted) and answers its requests until the link breaks. */
  private void connectAndRead() {
    while (!stopped) {
      try (SocketChannel open = SocketChannel.open(StandardProtocolFamily.UNIX)) {
        open.connect(UnixDomainSocketAddress.of(socket.toPath()));
        channel = open;
        LOG.info("statestore: the driver is linked to its controller at {}", socket);
        announceApplication(); // a restarted controller learns it again
        BufferedReader lines = new BufferedReader(
            new InputStreamReader(Channels.newInputStream(open), StandardCharsets.UTF_8));
        for (String line = lines.readLine(); line != null; line = lines.readLine()) {
          JsonNode message = JSON.readTree(line);
          if (message.has("ack")) {
            java.util.concurrent.CountDownLatch waiting = awaited.remove(message.path("ack").asLong());
            if (waiting != null) waiting.countDown();
          } else {
            answer(message);
          }
        }
      } catch (IOException e) {
        // not listening yet, or restarting: try again shortly
      } finally {
        channel = null;
      }
      pause(POLL_MS);
    }
  }

  private void answer(JsonNode request) {
    ObjectNode reply = JSON.createObjectNode().put("reply", request.path("request").asLong());
    try {
      String root = request.path("state_root").asText();
      int operator = request.path("operator").asInt();
      int partition = request.path("partition").asInt();
      String storeName = request.path("store_name").asText();
      String runId = request.path("run_id").asText();
      String location = switch (request.path("op").asText()) {
        case "steer" -> Steering.steer(root, operator, partition, storeName, runId, request.path("host").asText(),
            request.path("executor").asText());
        case "locate" -> Steering.location(root, operator, partition, storeName, runId);
        default -> throw new IllegalArgumentException("unknown request " + request.path("op").asText());
      };
      reply.put("location", location);
    } catch (RuntimeException e) {
      reply.put("error", e.toString());
    }
    send(reply.toString());
  }

  /**
   * A query run started on the checkpoint whose state stores live under {@code stateRoot}: the controller steers
   * its partitions for the run's first batch, and acknowledges. Returns whether it did within {@code waitMs}
   * (false when not linked).
   */
  boolean queryStarted(String runId, String stateRoot, long waitMs) {
    long ack = acks.incrementAndGet();
    java.util.concurrent.CountDownLatch done = new java.util.concurrent.CountDownLatch(1);
    awaited.put(ack, done);
    try {
      ObjectNode event = JSON.createObjectNode().put("event", "query_started").put("run_id", runId)
          .put("state_root", stateRoot).put("ack", ack);
      return send(event.toString()) && done.await(waitMs, TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    } finally {
      awaited.remove(ack);
    }
  }

  /** A query run stopped (queued: sent once linked). */
  void queryStopped(String runId) {
    outbox.add(JSON.createObjectNode().put("event", "query_stopped").put("run_id", runId).toString());
  }

  /** Tells the controller the application's id and UI (for this host's registry), once Spark has them. */
  private void announceApplication() {
    String id = sc.applicationId(); // null until the SparkContext's scheduler started
    if (id == null) return;
    ObjectNode event = JSON.createObjectNode().put("event", "application").put("id", id)
        .put("name", sc.appName());
    scala.Option<String> ui = sc.uiWebUrl();
    if (ui.isDefined()) event.put("ui", ui.get());
    send(event.toString());
  }

  private void sendOutbox() {
    while (!stopped) {
      try {
        String event = outbox.poll(POLL_MS, TimeUnit.MILLISECONDS);
        if (event == null) continue;
        while (!stopped && !send(event)) pause(POLL_MS); // kept until the controller takes it
      } catch (InterruptedException e) {
        return;
      }
    }
  }

  /** Sends one line; false when not linked. */
  private boolean send(String line) {
    SocketChannel open = channel;
    if (open == null) return false;
    ByteBuffer bytes = ByteBuffer.wrap((line + "\n").getBytes(StandardCharsets.UTF_8));
    synchronized (sending) {
      try {
        while (bytes.hasRemaining()) open.write(bytes);
        return true;
      } catch (IOException e) {
        return false;
      }
    }
  }

  /** The executors being decommissioned, sent while there are any (the controller drains each once). */
  private void pollDecommissioning() {
    while (!stopped) {
      pause(POLL_MS);
      String now = Steering.decommissioningExecutors(sc);
      if (now.isEmpty() && lastDecommissioning.isEmpty()) continue;
      lastDecommissioning = now;
      List<String> executors = now.isEmpty() ? List.of() : Arrays.asList(now.split(","));
      ObjectNode event = JSON.createObjectNode().put("event", "decommissioning");
      executors.forEach(event.putArray("executors")::add);
      send(event.toString());
    }
  }

  private static void pause(long millis) {
    try {
      Thread.sleep(millis);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  private static void daemon(Runnable body, String name) {
    Thread thread = new Thread(body, name);
    thread.setDaemon(true);
    thread.start();
  }
}
