package io.statestore.spark;

import java.io.File;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.execution.streaming.state.NoPrefixKeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreConf;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * Loads one version of one store partition through our provider, with a state node at a given socket, and prints
 * where the state came from: tests/test_load_sources.py sets up the checkpoint location and the node's copy
 * (same history, an abandoned one, ahead) and checks the provider's choice.
 *
 * <p>Usage: {@code LoadCheck <state root> <partition id> <local dir> <node socket> <version> [<peerFetch>]}. Prints one line:
 * {@code source=<s> from=<v> applied=<n> ms=<load time> keys=<k> passed=<why>}.
 */
public final class LoadCheck {
  private LoadCheck() {}

  public static void main(String[] args) throws Exception {
    String root = args[0];
    int partition = Integer.parseInt(args[1]);
    SQLConf sql = new SQLConf();
    sql.setConfString(ProviderSettings.PREFIX + "localDir", args[2]);
    sql.setConfString(ProviderSettings.PREFIX + "nodeSocket", args[3]);
    sql.setConfString(ProviderSettings.PREFIX + "replicationFactor", "1");
    long version = Long.parseLong(args[4]);
    sql.setConfString(ProviderSettings.PREFIX + "peerFetch", args.length > 5 ? args[5] : "never");
    StateStoreConf conf = new StateStoreConf(sql, scala.collection.immutable.Map$.MODULE$.empty());
    StructType key = DataTypes.createStructType(
        new org.apache.spark.sql.types.StructField[] {DataTypes.createStructField("k", DataTypes.StringType, true)});
    StatestoreProvider provider = new StatestoreProvider();
    provider.init(new StateStoreId(root, 0, partition, "default"), key, key, new NoPrefixKeyStateEncoderSpec(key),
        false, conf, new Configuration(), false, scala.Option.empty());
    StateStore store = provider.getStore(version, scala.Option.empty(), false, false);
    StateLoader.Loaded load = provider.lastLoad();
    System.out.println("source=" + load.source().label() + " from=" + load.fromVersion() + " applied="
        + load.versionsApplied() + " ms=" + load.millis() + " keys=" + store.metrics().numKeys() + " passed="
        + load.passedOver());
    store.abort();
    provider.close();
    System.out.flush();
    new File(args[2]).mkdirs();
  }
}
