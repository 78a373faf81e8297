package io.statestore.spark;

import java.util.Map;
import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.apache.spark.api.plugin.SparkPlugin;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Starts each executor's state node as soon as the executor starts ({@code spark.plugins}, set by
 * {@code spark_provider.enable()}), not at its first stateful commit: an executor Spark starts to replace a lost
 * one runs no stateful task until something moves there, yet its node is what brings the replica groups back to
 * q replicas. Off when replication is off or a node runs as a service.
 *
 * <p>On the driver ({@link DriverSide}) it starts the replica groups' controller when no {@code controller}
 * setting names one (an application configured by Spark confs alone), and links it to Spark's scheduler.
 *
 * <p>It also loads the native libraries a load needs (RocksDB's, zstd's) and the provider's classes in the
 * background, so that a partition failing over to an executor that never ran a stateful task does not pay for
 * them inside its load (about 0.4 s on the failover bench's replacement executors), and runs the branches of the
 * store's path that only a moved partition's first batch takes ({@link MoveWarmUp}), so that the JIT compiles
 * Spark's operator loop with them.
 */
public final class StatestorePlugin implements SparkPlugin {
  private static final Logger LOG = LoggerFactory.getLogger(StatestorePlugin.class);

  @Override
  public DriverPlugin driverPlugin() {
    return new DriverSide();
  }

  @Override
  public ExecutorPlugin executorPlugin() {
    return new ExecutorPlugin() {
      @Override
      public void init(PluginContext context, Map<String, String> extraConf) {
        Thread starter = new Thread(() -> {
          startNode(context);
          if (!runsOurProvider(context)) return; // Spark's own provider, under the checkpoint file layer
          warmUp(context);
          openAhead(context);
          MoveWarmUp.run(ProviderSettings.from(context.conf()));
        }, "statestore-node-start");
        starter.setDaemon(true);
        starter.start(); // the executor's start-up does not wait for the node
      }
    };
  }

  /** Whether the application's stateful queries run on our provider (the default class too: a user may set it per
   * session), not on Spark's RocksDB provider with our checkpoint file layer under it, whose loads our warm-ups do
   * not help. */
  private static boolean runsOurProvider(PluginContext context) {
    String provider = context.conf().get("spark.sql.streaming.stateStore.providerClass", "");
    return !provider.equals("org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider");
  }

  private static void warmUp(PluginContext context) {
    try {
      Class.forName(LocalStore.class.getName()); // its static initializer loads RocksDB's native library
      Class.forName(StateLoader.class.getName());
      com.github.luben.zstd.Zstd.decompress(com.github.luben.zstd.Zstd.compress(new byte[] {1}, 1), 1);
    } catch (Throwable e) {
      LOG.info("statestore: warm-up of executor {} skipped ({}); the first load does it", context.executorID(),
          e.toString());
    }
  }

  private static void openAhead(PluginContext context) {
    try {
      PreparedStores.start(ProviderSettings.from(context.conf()),
          org.apache.spark.deploy.SparkHadoopUtil.get().newConfiguration(context.conf()));
    } catch (RuntimeException e) {
      LOG.info("statestore: executor {} opens no copies ahead of moves ({})", context.executorID(), e.toString());
    }
  }

  private static void startNode(PluginContext context) {
    try {
      ProviderSettings settings = ProviderSettings.from(context.conf());
      if (settings.nodeSocket != null) return;
      LocalChannel channel = LocalChannel.of(settings);
      if (channel != null) channel.startNode(LocalChannel.sidecarSpec(settings));
    } catch (Exception e) {
      LOG.warn("statestore: the state node of executor {} was not started with it ({}); it starts at the first "
          + "stateful commit instead", context.executorID(), e.toString());
    }
  }
}
