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
 * <p>Usage: {@code LoadCheck <state root> <partition id> <local dir> <node socket> <version> [<peerFetch>
 * [abort-reload|force-snapshot]]}: with {@code abort-reload}, the loaded store then writes a thousand keys, aborts,
 * and the same version is loaded again (a second line); with {@code force-snapshot} the load is asked, as Spark's
 * coordinator does for a store whose snapshots lag, for a snapshot at its commit, and one key is committed. Prints one line:
 * {@code source=<s> from=<v> applied=<n> ms=<load time> keys=<k> passed=<why>}.
 */
public final class LoadCheck {
  private LoadCheck() {}

  private static org.apache.spark.sql.catalyst.expressions.UnsafeRow row(StructType schema, String value) {
    return org.apache.spark.sql.catalyst.expressions.UnsafeProjection.create(schema).apply(
        new org.apache.spark.sql.catalyst.expressions.GenericInternalRow(
            new Object[] {org.apache.spark.unsafe.types.UTF8String.fromString(value)})).copy();
  }

  private static void report(StatestoreProvider provider, StateStore store) {
    StateLoader.Loaded load = provider.lastLoad();
    System.out.println("source=" + load.source().label() + " from=" + load.fromVersion() + " applied="
        + load.versionsApplied() + " ms=" + load.millis() + " keys=" + store.metrics().numKeys() + " passed="
        + load.passedOver());
  }

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
    String mode = args.length > 6 ? args[6] : "";
    // force-snapshot: Spark's coordinator asks for a snapshot at this commit (its third argument).
    StateStore store = provider.getStore(version, scala.Option.empty(), mode.equals("force-snapshot"), false);
    report(provider, store);
    if (mode.equals("force-snapshot")) {
      store.put(row(key, "written"), row(key, "written"), "default");
      store.commit();
      provider.close(); // waits for the snapshot under way
      return;
    }
    if (mode.equals("abort-reload")) {
      // A batch writes, then aborts (its task failed): the retry loads the same version on the same provider.
      for (int i = 0; i < 1000; i++) {
        store.put(row(key, "written-then-aborted-" + i), row(key, "written-then-aborted-" + i), "default");
      }
      store.abort();
      store = provider.getStore(version, scala.Option.empty(), false, false);
      report(provider, store);
    }
    store.abort();
    provider.close();
    System.out.flush();
    new File(args[2]).mkdirs();
  }
}
