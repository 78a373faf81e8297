package io.statestore.spark;

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import org.apache.spark.sql.execution.streaming.state.StateStoreConf;
import org.apache.spark.sql.internal.SQLConf;

/**
 * Where this JVM's state node sidecar keeps its data and socket (LocalChannel, NodeSidecar), driven from
 * tests/test_sidecar_dirs.py one JVM per call. Prints {@code key=value} lines.
 *
 * <p>Usage:
 * <ul>
 *   <li>{@code dirs <localRoot> <executorId> [hold]}: the sidecar data dir and socket of this JVM (the first
 *       call deletes dead JVMs' directories under the root, as at an executor's start-up); creates the data dir
 *       with a file in it; with {@code hold}, prints {@code ready} and waits until stdin is closed.
 *   <li>{@code socket <dataDir>...}: the socket path chosen for each data dir, nothing created.
 *   <li>{@code restart <localRoot> <controllerA> <controllerB>}: hands a COMMITTED frame to the channel with
 *       controller A's spec (the sidecar starts), plants a file in its data dir, waits for a line on stdin, then
 *       hands one with controller B's spec (a new application in this JVM: the sidecar is replaced), prints,
 *       and waits until stdin is closed. The frames carry no valid increment: the node refuses them, which is
 *       an answer all the same.
 * </ul>
 */
public final class SidecarDirsCheck {
  private SidecarDirsCheck() {}

  static void print(String key, Object value) {
    System.out.println(key + "=" + value);
    System.out.flush();
  }

  static ProviderSettings settings(String localRoot, String controller) {
    SQLConf sql = new SQLConf();
    sql.setConfString(ProviderSettings.PREFIX + "localDir", localRoot);
    sql.setConfString(ProviderSettings.PREFIX + "replicationFactor", "1");
    sql.setConfString(ProviderSettings.PREFIX + "controller", controller);
    return ProviderSettings.from(new StateStoreConf(sql, scala.collection.immutable.Map$.MODULE$.empty()));
  }

  /** A sync commit, waited for as the provider waits for one: the sidecar has started and answered after it. */
  static void commit(LocalChannel channel, ProviderSettings settings, long version) {
    LocalChannel.awaitSync(channel.committed("0/0/default", "/nonexistent/checkpoint/0/0", version, false,
        new byte[] {1, 2, 3}, true, LocalChannel.sidecarSpec(settings)), "0/0/default", version);
  }

  public static void main(String[] args) throws Exception {
    BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    print("pid", ProcessHandle.current().pid());
    switch (args[0]) {
      case "dirs" -> {
        File dataDir = LocalChannel.sidecarDataDir(args[1], args[2]);
        print("dataDir", dataDir);
        print("socket", LocalChannel.sidecarSocket(dataDir));
        File replicas = new File(dataDir, "replicas");
        if (!replicas.mkdirs()) throw new IllegalStateException("cannot create " + replicas);
        Files.writeString(new File(replicas, "marker").toPath(), "of JVM " + ProcessHandle.current().pid());
        if (args.length > 3 && args[3].equals("hold")) {
          print("ready", "yes");
          while (stdin.readLine() != null) {
            // wait for stdin to close
          }
        }
      }
      case "socket" -> {
        for (int i = 1; i < args.length; i++) print("socket", LocalChannel.sidecarSocket(new File(args[i])));
      }
      case "restart" -> {
        ProviderSettings a = settings(args[1], args[2]);
        ProviderSettings b = settings(args[1], args[3]);
        LocalChannel channel = LocalChannel.of(a);
        if (LocalChannel.of(b) != channel) throw new IllegalStateException("one channel per JVM expected");
        File dataDir = LocalChannel.sidecarDataDir(args[1], "driver");
        print("dataDir", dataDir);
        print("socket", LocalChannel.sidecarSocket(dataDir));
        commit(channel, a, 1);
        File planted = new File(dataDir, "replicas/of-application-a/marker");
        if (!planted.getParentFile().mkdirs()) throw new IllegalStateException("cannot create " + planted);
        Files.writeString(planted.toPath(), "a replica of application A");
        print("planted", planted);
        print("first", "done");
        stdin.readLine();
        commit(channel, b, 1);
        print("second", "done");
        while (stdin.readLine() != null) {
          // wait for stdin to close
        }
      }
      default -> throw new IllegalArgumentException("unknown mode " + args[0]);
    }
    System.exit(0);
  }
}
