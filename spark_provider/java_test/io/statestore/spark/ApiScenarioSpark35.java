package io.statestore.spark;

import java.io.File;
import java.util.ArrayList;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreConf;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreProvider;
import org.apache.spark.sql.execution.streaming.state.UnsafeRowPair;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * ApiScenario for Spark 3.5's StateStore contract (one key-value space, a scan prefix of the key's first columns,
 * no column families, lists or range scans): gets, puts, removes, iterators, prefix scans, commits, aborts, older
 * versions, fresh providers and restarts from the checkpoint location, printed as a transcript that
 * tests/test_provider_api.py compares between our provider and Spark 3.5's RocksDBStateStoreProvider.
 *
 * <p>Usage: {@code ApiScenarioSpark35 <provider class> <checkpoint root> <scenario|all>}.
 */
public final class ApiScenarioSpark35 extends ApiTranscript {
  static final StructType KEY = schema("grp", DataTypes.IntegerType, "item", DataTypes.StringType);
  static final StructType PREFIX = schema("grp", DataTypes.IntegerType);
  static final StructType VALUE = schema("v", DataTypes.LongType);
  static final String RUN_ID = java.util.UUID.randomUUID().toString();
  private final String providerClass;
  private final File root;
  private final List<StateStoreProvider> open = new ArrayList<>();
  private String scenarioDir;
  private int prefixColumns;

  ApiScenarioSpark35(String providerClass, File root) {
    this.providerClass = providerClass;
    this.root = root;
  }

  static UnsafeRow key(int grp, String item) {
    return row(KEY, grp, item);
  }

  static UnsafeRow value(long v) {
    return row(VALUE, v);
  }

  StateStoreProvider provider() throws Exception {
    StateStoreProvider p = (StateStoreProvider) Class.forName(providerClass).getDeclaredConstructor().newInstance();
    SQLConf sql = new SQLConf();
    sql.setConfString("spark.sql.streaming.stateStore.minDeltasForSnapshot", "2");
    sql.setConfString("spark.sql.streaming.stateStore.statestore.localDir", new File(root, "local").getPath());
    StateStoreConf conf = new StateStoreConf(sql, scala.collection.immutable.Map$.MODULE$.empty());
    StateStoreId id = new StateStoreId(new File(root, scenarioDir).getPath(), 0, 0, "default");
    Configuration hadoop = new Configuration();
    hadoop.set("sql.streaming.runId", RUN_ID);
    p.init(id, KEY, VALUE, prefixColumns, conf, hadoop);
    open.add(p);
    return p;
  }

  static String scan(scala.collection.Iterator<UnsafeRowPair> it) {
    StringBuilder b = new StringBuilder();
    int n = 0;
    while (it.hasNext()) {
      UnsafeRowPair p = it.next();
      b.append(' ').append(show(p.key(), KEY)).append('=').append(show(p.value(), VALUE));
      n++;
    }
    return "[" + n + "]" + b;
  }

  void commit(StateStore s) {
    op("commit", s::commit);
    op("numKeys after commit", () -> s.metrics().numKeys());
  }

  /** Everything readable from the store: its iterator, gets of every key written, and prefix scans. */
  void dump(String label, StateStore s) {
    line("== dump " + label + " (version " + s.version() + ")");
    op("iterator (sorted)", () -> sortedScan(s.iterator()));
    for (int g = -1; g <= 3; g++) {
      for (String item : new String[] {"a", "b", ""}) {
        int gg = g;
        op("get (" + g + "," + item + ")", () -> show(s.get(key(gg, item)), VALUE));
      }
      if (prefixColumns > 0) {
        int gg = g;
        op("prefixScan " + g, () -> scan(s.prefixScan(row(PREFIX, gg))));
      }
    }
  }

  /** Spark 3.5's RocksDB provider iterates plain keys in byte order of their rows, ours in the same order; sorted
   * here all the same, as the contract does not define an order. */
  static String sortedScan(scala.collection.Iterator<UnsafeRowPair> it) {
    List<String> pairs = new ArrayList<>();
    while (it.hasNext()) {
      UnsafeRowPair p = it.next();
      pairs.add(show(p.key(), KEY) + "=" + show(p.value(), VALUE));
    }
    java.util.Collections.sort(pairs);
    return "[" + pairs.size() + "] " + String.join(" ", pairs);
  }

  void putAll(StateStore s, int[] groups, String[] items, long base) {
    long n = base;
    for (int g : groups) {
      for (String item : items) s.put(key(g, item), value(n++));
    }
  }

  void versions() throws Exception {
    StateStoreProvider p = provider();
    StateStore s = p.getStore(0);
    op("put groups 2,-1,1 x a,b", () -> { putAll(s, new int[] {2, -1, 1}, new String[] {"a", "b"}, 0); return null; });
    op("put (2,a) again", () -> { s.put(key(2, "a"), value(99)); return null; });
    commit(s);
    StateStore s2 = p.getStore(1);
    dump("v1", s2);
    op("put (3,a), remove (-1,a), update (1,b), remove (0,a) (absent)", () -> {
      s2.put(key(3, "a"), value(30));
      s2.remove(key(-1, "a"));
      s2.put(key(1, "b"), value(11));
      s2.remove(key(0, "a"));
      return null;
    });
    commit(s2);
    StateStore s3 = p.getStore(2);
    op("put (0,b), remove (2,b) then abort", () -> {
      s3.put(key(0, "b"), value(1));
      s3.remove(key(2, "b"));
      return null;
    });
    op("abort", () -> { s3.abort(); return null; });
    op("hasCommitted after abort", s3::hasCommitted);
    StateStore s4 = p.getStore(2);
    dump("v2 reloaded after abort", s4);
    op("remove group 2 while scanning it", () -> {
      scala.collection.Iterator<UnsafeRowPair> it = s4.iterator();
      List<UnsafeRow> keys = new ArrayList<>();
      while (it.hasNext()) {
        UnsafeRow k = it.next().key();
        if (k.getInt(0) == 2) keys.add(k.copy());
      }
      for (UnsafeRow k : keys) s4.remove(k);
      return keys.size();
    });
    commit(s4);
    op("hasCommitted", s4::hasCommitted);
    StateStore old = p.getStore(2);
    dump("older v2 on the same provider", old);
    old.abort();
    for (long ver = 1; ver <= 3; ver++) {
      StateStoreProvider fresh = provider();
      StateStore f = fresh.getStore(ver);
      dump("fresh provider v" + ver, f);
      f.abort();
      fresh.close();
    }
    StateStore old1 = p.getStore(1);
    op("write on top of v1: put (-1,b) 7", () -> { old1.put(key(-1, "b"), value(7)); return null; });
    commit(old1);
    StateStoreProvider fresh = provider();
    StateStore f = fresh.getStore(2);
    dump("fresh provider after rewriting v2", f);
    op("put (1,a) 5", () -> { f.put(key(1, "a"), value(5)); return null; });
    commit(f);
    fresh.close();
    StateStoreProvider fresh2 = provider();
    StateStore f2 = fresh2.getStore(3);
    dump("second fresh provider v3", f2);
    f2.abort();
  }

  void run(String scenario) throws Exception {
    String[] all = {"versions", "prefix"};
    for (String name : scenario.equals("all") ? all : new String[] {scenario}) {
      scenarioDir = name;
      // The same operations with plain keys, then with the key's first column as a scan prefix.
      prefixColumns = name.equals("prefix") ? 1 : 0;
      line("### scenario " + name);
      versions();
      for (StateStoreProvider p : open) {
        try {
          p.close();
        } catch (Exception e) {
          // closed already
        }
      }
      open.clear();
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 3) {
      System.err.println("usage: ApiScenarioSpark35 <provider class> <checkpoint root> <scenario|all>");
      System.exit(2);
    }
    ApiScenarioSpark35 s = new ApiScenarioSpark35(args[0], new File(args[1]));
    s.run(args[2]);
    s.printAndExit();
  }
}
