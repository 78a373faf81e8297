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
 */
public final class StatestorePlugin implements SparkPlugin {
  private static final Logger LOG = LoggerFactory.getLogger(StatestorePlugin.class);

  @Override
  public DriverPlugin driverPlugin() {
    return null;
  }

  @Override
  public ExecutorPlugin executorPlugin() {
    return new ExecutorPlugin() {
      @Override
      public void init(PluginContext context, Map<String, String> extraConf) {
        Thread starter = new Thread(() -> startNode(context), "statestore-node-start");
        starter.setDaemon(true);
        starter.start(); // the executor's start-up does not wait for the node
      }
    };
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
