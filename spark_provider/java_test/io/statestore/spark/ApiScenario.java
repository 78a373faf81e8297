package io.statestore.spark;

import java.io.File;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.streaming.state.KeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.NoPrefixKeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.PrefixKeyScanStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.RangeKeyScanStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreConf;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreIterator;
import org.apache.spark.sql.execution.streaming.state.StateStoreProvider;
import org.apache.spark.sql.execution.streaming.state.UnsafeRowPair;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * Drives a StateStoreProvider through the StateStore API (column families, multi-value keys, prefix and range
 * scans, deleteRange, remove, abort, older versions, restart from the checkpoint location) and prints a
 * canonical transcript. tests/test_provider_api.py runs it for our provider and for Spark's
 * RocksDBStateStoreProvider and compares the transcripts line by line.
 *
 * <p>Usage: {@code ApiScenario <provider class> <checkpoint root> <scenario|all>}.
 */
public final class ApiScenario extends ApiTranscript {
  record Cf(StructType key, StructType value, KeyStateEncoderSpec spec, boolean multi) {}

  static final StructType DEFAULT_KEY = schema("k", DataTypes.IntegerType);
  static final StructType DEFAULT_VALUE = schema("v", DataTypes.LongType);
  static final Map<String, Cf> CFS = new LinkedHashMap<>();

  static {
    CFS.put("default", new Cf(DEFAULT_KEY, DEFAULT_VALUE, new NoPrefixKeyStateEncoderSpec(DEFAULT_KEY), false));
    StructType listKey = schema("name", DataTypes.StringType);
    CFS.put("list", new Cf(listKey, schema("x", DataTypes.IntegerType, "s", DataTypes.StringType),
        new NoPrefixKeyStateEncoderSpec(listKey), true));
    CFS.put("plain", new Cf(DEFAULT_KEY, DEFAULT_VALUE, new NoPrefixKeyStateEncoderSpec(DEFAULT_KEY), false));
    StructType pfxKey = schema("grp", DataTypes.IntegerType, "item", DataTypes.StringType);
    CFS.put("pfx", new Cf(pfxKey, DEFAULT_VALUE, new PrefixKeyScanStateEncoderSpec(pfxKey, 1), false));
    StructType rngKey = schema("ts", DataTypes.LongType, "id", DataTypes.IntegerType);
    CFS.put("rng", new Cf(rngKey, schema("v", DataTypes.StringType),
        new RangeKeyScanStateEncoderSpec(rngKey, Scala.seq(List.<Object>of(0))), false));
    CFS.put("rngl", new Cf(rngKey, schema("x", DataTypes.IntegerType, "s", DataTypes.StringType),
        new RangeKeyScanStateEncoderSpec(rngKey, Scala.seq(List.<Object>of(0, 1))), true));
  }

  static final String RUN_ID = java.util.UUID.randomUUID().toString();
  private final String providerClass;
  private final File root;
  private final List<StateStoreProvider> open = new ArrayList<>();
  private String scenarioDir;
  /**
   * Marks counts taken after a deleteRange: Spark's provider does not count the keys deleteRange removes, so
   * its numKeys stays too high from then on; the test compares these lines with the iterators instead.
   */
  private String countNote = "";
  private int opId;

  ApiScenario(String providerClass, File root) {
    this.providerClass = providerClass;
    this.root = root;
  }

  // ---------------------------------------------------------------- rows and printing

  /** A method of a newer Spark line's StateStore contract, absent from the running line's. */
  static final class Absent extends Exception {
    Absent(String method) {
      super(method + " is not in this Spark line's StateStore contract");
    }
  }

  /**
   * Calls a method that only some Spark lines' contract has (4.1+: multi-value lists, range scans, keyExists),
   * looked up on the contract's interface, not on the store's class (ours has them on every line): absent on a line
   * without it, for both providers alike.
   */
  @SuppressWarnings("unchecked")
  static <T> T call(Class<?> contract, Object target, String name, Object... args) throws Exception {
    for (java.lang.reflect.Method m : contract.getMethods()) {
      if (m.getName().equals(name) && m.getParameterCount() == args.length) {
        try {
          return (T) m.invoke(target, args);
        } catch (java.lang.reflect.InvocationTargetException e) {
          if (e.getCause() instanceof Exception cause) throw cause;
          throw e;
        }
      }
    }
    throw new Absent(name);
  }

  static <T> T call(StateStore s, String name, Object... args) throws Exception {
    return call(StateStore.class, s, name, args);
  }

  @Override
  String absence(Exception e) {
    return e instanceof Absent ? "absent on this Spark line" : null;
  }


  // ---------------------------------------------------------------- provider plumbing

  StateStoreProvider provider() throws Exception {
    StateStoreProvider p = (StateStoreProvider) Class.forName(providerClass).getDeclaredConstructor().newInstance();
    SQLConf sql = new SQLConf();
    sql.setConfString("spark.sql.streaming.stateStore.minDeltasForSnapshot", "2");
    sql.setConfString("spark.sql.streaming.stateStore.statestore.localDir", new File(root, "local").getPath());
    sql.setConfString("spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows", "true");
    StateStoreConf conf = new StateStoreConf(sql, scala.collection.immutable.Map$.MODULE$.empty());
    StateStoreId id = new StateStoreId(new File(root, scenarioDir).getPath(), opId, 0, "default");
    Configuration hadoop = new Configuration();
    // Spark's provider reads the query's run id from the Hadoop conf, as a streaming query sets it.
    hadoop.set("sql.streaming.runId", RUN_ID); // StreamExecution.RUN_ID_KEY, whose package differs between lines
    p.init(id, DEFAULT_KEY, DEFAULT_VALUE, CFS.get("default").spec(), true, conf, hadoop, false,
        scala.Option.empty());
    open.add(p);
    return p;
  }

  static StateStore store(StateStoreProvider p, long version) throws Exception {
    try {
      return call(StateStoreProvider.class, p, "getStore", version, scala.Option.empty(), false, false); // 4.2+
    } catch (Absent e) {
      return call(StateStoreProvider.class, p, "getStore", version, scala.Option.empty());
    }
  }

  static void create(StateStore s, String cf) {
    Cf c = CFS.get(cf);
    s.createColFamilyIfAbsent(cf, c.key(), c.value(), c.spec(), c.multi(), false);
  }

  /** keyExists where the line has it, else whether get finds the key (an error: as if present). */
  static boolean keyExists(StateStore s, UnsafeRow key, String cf) {
    try {
      return call(s, "keyExists", key, cf);
    } catch (Absent e) {
      return s.get(key, cf) != null;
    } catch (Exception e) {
      return true;
    }
  }

  static long numKeys(StateStore s) {
    return s.metrics().numKeys();
  }

  /** Spark's provider gives metrics only once committed: the exact count is compared after each commit. */
  void commit(StateStore s) {
    op("commit", s::commit);
    op("numKeys after commit" + countNote, () -> numKeys(s));
  }

  // ---------------------------------------------------------------- dumps

  static final String[] LIST_KEYS = {"a", "b", "c", "d", "e", "f", "g"};

  static String scan(StateStoreIterator<UnsafeRowPair> it, Cf c) {
    StringBuilder b = new StringBuilder();
    int n = 0;
    while (it.hasNext()) {
      UnsafeRowPair p = it.next();
      b.append(' ').append(show(p.key(), c.key())).append('=').append(show(p.value(), c.value()));
      n++;
    }
    it.close();
    return "[" + n + "]" + b;
  }

  /** Everything readable from the store, for each of the given column families. */
  void dump(String label, StateStore s, String... cfs) {
    line("== dump " + label + " (version " + s.version() + ")");
    for (String cf : cfs) {
      Cf c = CFS.get(cf);
      // The plain iterator of a multi-value family has no defined value layout in Spark: not compared.
      if (!c.multi()) op(cf + " iterator", () -> scan(s.iterator(cf), c));
      switch (cf) {
        case "default", "plain" -> {
          for (int k = 0; k <= 9; k++) {
            int kk = k;
            op(cf + " get " + k, () -> show(s.get(row(c.key(), kk), cf), c.value()));
          }
        }
        case "list" -> {
          op(cf + " iteratorWithMultiValues", () -> scan(call(s, "iteratorWithMultiValues", cf), c));
          for (String k : LIST_KEYS) {
            op(cf + " keyExists " + k, () -> call(s, "keyExists", row(c.key(), k), cf));
            List<String> vs = new ArrayList<>();
            op(cf + " valuesIterator " + k, () -> {
              scala.collection.Iterator<UnsafeRow> it = s.valuesIterator(row(c.key(), k), cf);
              while (it.hasNext()) vs.add(show(it.next(), c.value()));
              return vs.toString();
            });
            // get() of a multi-value key is defined for presence only, and Spark returns an undefined row for a
            // key holding an empty list (we return null): compared for keys with values or without an entry.
            if (!vs.isEmpty() || !keyExists(s, row(c.key(), k), cf)) {
              op(cf + " get " + k + " present", () -> s.get(row(c.key(), k), cf) != null);
            }
          }
        }
        case "pfx" -> {
          StructType prefix = schema("grp", DataTypes.IntegerType);
          for (int g = -1; g <= 3; g++) {
            int gg = g;
            op(cf + " prefixScan " + g, () -> scan(s.prefixScan(row(prefix, gg), cf), c));
          }
        }
        case "rng", "rngl" -> {
          long[][] bounds = {{Long.MIN_VALUE, Long.MIN_VALUE}, {-5, 10}, {0, Long.MIN_VALUE}, {Long.MIN_VALUE, 0},
              {3, 3}, {-100, -1}, {4, 100}};
          for (long[] bd : bounds) {
            String label2 = (bd[0] == Long.MIN_VALUE ? "None" : bd[0]) + ".." + (bd[1] == Long.MIN_VALUE ? "None" : bd[1]);
            scala.Option<UnsafeRow> from = bd[0] == Long.MIN_VALUE ? scala.Option.empty()
                : scala.Option.apply(row(c.key(), bd[0], 0));
            scala.Option<UnsafeRow> to = bd[1] == Long.MIN_VALUE ? scala.Option.empty()
                : scala.Option.apply(row(c.key(), bd[1], 0));
            if (!c.multi()) op(cf + " rangeScan " + label2, () -> scan(call(s, "rangeScan", from, to, cf), c));
            else op(cf + " rangeScanWithMultiValues " + label2, () -> scan(call(s, "rangeScanWithMultiValues", from, to, cf), c));
          }
        }
        default -> { }
      }
    }
  }

  /** A fresh provider restores {@code version} from the checkpoint location and commits it unchanged. */
  void restartAndCommit(long version, String... cfs) throws Exception {
    StateStoreProvider fresh = provider();
    StateStore f = store(fresh, version);
    for (String cf : cfs) create(f, cf);
    line("restart from the checkpoint location at v" + version + ", commit unchanged");
    commit(f);
    StateStore g = store(fresh, version + 1);
    for (String cf : cfs) create(g, cf);
    dump("after restart and commit", g, cfs);
    g.abort();
    fresh.close();
  }

  // ---------------------------------------------------------------- scenarios

  static UnsafeRow[] vals(StructType schema, Object... xs) {
    UnsafeRow[] r = new UnsafeRow[xs.length];
    for (int i = 0; i < xs.length; i++) r[i] = row(schema, xs[i], "s" + xs[i]);
    return r;
  }

  void multiValue() throws Exception {
    StateStoreProvider p = provider();
    Cf c = CFS.get("list");
    StructType k = c.key();
    StructType v = c.value();
    StateStore s = store(p, 0);
    create(s, "list");
    op("putList a [1,2]", () -> { call(s, "putList", row(k, "a"), vals(v, 1, 2), "list"); return null; });
    op("merge b 3", () -> { s.merge(row(k, "b"), vals(v, 3)[0], "list"); return null; });
    op("mergeList b [4,5]", () -> { call(s, "mergeList", row(k, "b"), vals(v, 4, 5), "list"); return null; });
    op("putList c []", () -> { call(s, "putList", row(k, "c"), vals(v), "list"); return null; });
    op("merge d 6", () -> { s.merge(row(k, "d"), vals(v, 6)[0], "list"); return null; });
    op("remove d", () -> { s.remove(row(k, "d"), "list"); return null; });
    op("mergeList e []", () -> { call(s, "mergeList", row(k, "e"), vals(v), "list"); return null; });
    op("put f 7", () -> { s.put(row(k, "f"), vals(v, 7)[0], "list"); return null; });
    op("merge f 8", () -> { s.merge(row(k, "f"), vals(v, 8)[0], "list"); return null; });
    op("remove g (absent)", () -> { s.remove(row(k, "g"), "list"); return null; });
    dump("v0 uncommitted", s, "list");
    commit(s);

    StateStore s2 = store(p, 1);
    create(s2, "list");
    dump("v1 as loaded after its commit", s2, "list");
    op("merge a 9", () -> { s2.merge(row(k, "a"), vals(v, 9)[0], "list"); return null; });
    op("mergeList a [10,11]", () -> { call(s2, "mergeList", row(k, "a"), vals(v, 10, 11), "list"); return null; });
    op("remove b", () -> { s2.remove(row(k, "b"), "list"); return null; });
    op("merge b 12", () -> { s2.merge(row(k, "b"), vals(v, 12)[0], "list"); return null; });
    op("putList f [13]", () -> { call(s2, "putList", row(k, "f"), vals(v, 13), "list"); return null; });
    op("merge c 14", () -> { s2.merge(row(k, "c"), vals(v, 14)[0], "list"); return null; });
    commit(s2);

    StateStore s3 = store(p, 2);
    create(s3, "list");
    dump("v2 as loaded after its commit", s3, "list");
    op("merge g 15", () -> { s3.merge(row(k, "g"), vals(v, 15)[0], "list"); return null; });
    op("mergeList a [16]", () -> { call(s3, "mergeList", row(k, "a"), vals(v, 16), "list"); return null; });
    commit(s3);

    for (long ver = 1; ver <= 3; ver++) {
      StateStoreProvider fresh = provider();
      StateStore f = store(fresh, ver);
      create(f, "list");
      dump("fresh provider v" + ver, f, "list");
      f.abort();
      fresh.close();
    }
    restartAndCommit(3, "list");
  }

  void columnFamilies() throws Exception {
    StateStoreProvider p = provider();
    StateStore s = store(p, 0);
    create(s, "plain");
    create(s, "pfx");
    op("put plain 1..4", () -> {
      for (int i = 1; i <= 4; i++) s.put(row(DEFAULT_KEY, i), row(DEFAULT_VALUE, (long) i * 10), "plain");
      return null;
    });
    op("put default 5", () -> { s.put(row(DEFAULT_KEY, 5), row(DEFAULT_VALUE, 50L), "default"); return null; });
    op("put pfx (1,x)", () -> { s.put(row(CFS.get("pfx").key(), 1, "x"), row(DEFAULT_VALUE, 1L), "pfx"); return null; });
    op("create plain again (no-op)", () -> { create(s, "plain"); return null; });
    commit(s);

    StateStore s2 = store(p, 1);
    create(s2, "plain");
    create(s2, "pfx");
    dump("v1", s2, "default", "plain", "pfx");
    op("removeColFamilyIfExists plain", () -> s2.removeColFamilyIfExists("plain"));
    op("removeColFamilyIfExists nope", () -> s2.removeColFamilyIfExists("nope"));
    op("get plain 1 after remove", () -> show(s2.get(row(DEFAULT_KEY, 1), "plain"), DEFAULT_VALUE));
    op("recreate plain", () -> { create(s2, "plain"); return null; });
    op("put plain 7", () -> { s2.put(row(DEFAULT_KEY, 7), row(DEFAULT_VALUE, 70L), "plain"); return null; });
    dump("v1 -> v2 uncommitted", s2, "default", "plain", "pfx");
    commit(s2);

    StateStore s3 = store(p, 2);
    create(s3, "plain");
    create(s3, "pfx");
    dump("v2", s3, "default", "plain", "pfx");
    op("removeColFamilyIfExists pfx", () -> s3.removeColFamilyIfExists("pfx"));
    op("put plain 8", () -> { s3.put(row(DEFAULT_KEY, 8), row(DEFAULT_VALUE, 80L), "plain"); return null; });
    commit(s3);

    StateStore s4 = store(p, 3);
    create(s4, "plain");
    op("recreate pfx in a later version", () -> { create(s4, "pfx"); return null; });
    op("put pfx (2,y)", () -> { s4.put(row(CFS.get("pfx").key(), 2, "y"), row(DEFAULT_VALUE, 2L), "pfx"); return null; });
    commit(s4);

    for (long ver = 1; ver <= 4; ver++) {
      StateStoreProvider fresh = provider();
      StateStore f = store(fresh, ver);
      create(f, "plain");
      create(f, "pfx");
      dump("fresh provider v" + ver, f, "default", "plain", "pfx");
      f.abort();
      fresh.close();
    }
    restartAndCommit(4, "plain", "pfx");
  }

  void scans() throws Exception {
    StateStoreProvider p = provider();
    StateStore s = store(p, 0);
    create(s, "pfx");
    create(s, "rng");
    create(s, "rngl");
    StructType pk = CFS.get("pfx").key();
    StructType rk = CFS.get("rng").key();
    StructType rlv = CFS.get("rngl").value();
    op("put pfx", () -> {
      int n = 0;
      for (int g : new int[] {2, -1, 1, 0, 3}) {
        for (String item : new String[] {"b", "a", "ccc", ""}) s.put(row(pk, g, item), row(DEFAULT_VALUE, (long) n++), "pfx");
      }
      return null;
    });
    op("put rng", () -> {
      for (long ts : new long[] {5, -3, 0, 10, -100, 3, 7, Long.MAX_VALUE, -1, 100}) {
        for (int id : new int[] {2, 0, -4}) s.put(row(rk, ts, id), row(CFS.get("rng").value(), "t" + ts + "/" + id), "rng");
      }
      return null;
    });
    op("merge rngl", () -> {
      for (long ts : new long[] {4, -2, 0, 9, 3}) {
        for (int id : new int[] {1, -1}) {
          s.merge(row(rk, ts, id), vals(rlv, (int) ts * 10 + id)[0], "rngl");
          call(s, "mergeList", row(rk, ts, id), vals(rlv, 1000 + id, 2000 + id), "rngl");
        }
      }
      return null;
    });
    op("remove pfx (1,a)", () -> { s.remove(row(pk, 1, "a"), "pfx"); return null; });
    op("remove rng (3,0)", () -> { s.remove(row(rk, 3L, 0), "rng"); return null; });
    commit(s);

    StateStore s2 = store(p, 1);
    create(s2, "pfx");
    create(s2, "rng");
    create(s2, "rngl");
    dump("v1", s2, "pfx", "rng", "rngl");
    countNote = " (after deleteRange)";
    op("deleteRange rng (-3,0)..(5,0)", () -> { call(s2, "deleteRange", row(rk, -3L, 0), row(rk, 5L, 0), "rng"); return null; });
    op("deleteRange rngl (0,0)..(4,0)", () -> { call(s2, "deleteRange", row(rk, 0L, 0), row(rk, 4L, 0), "rngl"); return null; });
    op("put rng (4,9)", () -> { s2.put(row(rk, 4L, 9), row(CFS.get("rng").value(), "new"), "rng"); return null; });
    op("remove pfx group 2 while scanning it", () -> {
      StateStoreIterator<UnsafeRowPair> it = s2.prefixScan(row(schema("grp", DataTypes.IntegerType), 2), "pfx");
      List<UnsafeRow> keys = new ArrayList<>();
      while (it.hasNext()) keys.add(it.next().key().copy());
      for (UnsafeRow key : keys) s2.remove(key, "pfx");
      return keys.size();
    });
    dump("v1 -> v2 uncommitted", s2, "pfx", "rng", "rngl");
    commit(s2);
    for (long ver = 1; ver <= 2; ver++) {
      StateStoreProvider fresh = provider();
      StateStore f = store(fresh, ver);
      create(f, "pfx");
      create(f, "rng");
      create(f, "rngl");
      dump("fresh provider v" + ver, f, "pfx", "rng", "rngl");
      f.abort();
      fresh.close();
    }
    restartAndCommit(2, "pfx", "rng", "rngl");
  }

  void versions() throws Exception {
    StateStoreProvider p = provider();
    StateStore s = store(p, 0);
    op("put default 1..5", () -> {
      for (int i = 1; i <= 5; i++) s.put(row(DEFAULT_KEY, i), row(DEFAULT_VALUE, (long) i), "default");
      return null;
    });
    op("put default 3 again", () -> { s.put(row(DEFAULT_KEY, 3), row(DEFAULT_VALUE, 33L), "default"); return null; });
    commit(s);
    StateStore s2 = store(p, 1);
    op("put 6, remove 1, update 2, remove 9 (absent)", () -> {
      s2.put(row(DEFAULT_KEY, 6), row(DEFAULT_VALUE, 6L), "default");
      s2.remove(row(DEFAULT_KEY, 1), "default");
      s2.put(row(DEFAULT_KEY, 2), row(DEFAULT_VALUE, 22L), "default");
      s2.remove(row(DEFAULT_KEY, 9), "default");
      return null;
    });
    commit(s2);
    StateStore s3 = store(p, 2);
    op("put 7, remove 2 then abort", () -> {
      s3.put(row(DEFAULT_KEY, 7), row(DEFAULT_VALUE, 7L), "default");
      s3.remove(row(DEFAULT_KEY, 2), "default");
      return null;
    });
    op("abort", () -> { s3.abort(); return null; });
    op("hasCommitted after abort", s3::hasCommitted);
    StateStore s4 = store(p, 2);
    dump("v2 reloaded after abort", s4, "default");
    op("put 8, remove 3", () -> {
      s4.put(row(DEFAULT_KEY, 8), row(DEFAULT_VALUE, 8L), "default");
      s4.remove(row(DEFAULT_KEY, 3), "default");
      return null;
    });
    commit(s4);
    op("hasCommitted", s4::hasCommitted);
    StateStore s5 = store(p, 3);
    op("put 9", () -> { s5.put(row(DEFAULT_KEY, 9), row(DEFAULT_VALUE, 9L), "default"); return null; });
    commit(s5);
    StateStore old = store(p, 2);
    dump("older v2 on the same provider", old, "default");
    old.abort();
    for (long ver = 1; ver <= 4; ver++) {
      StateStoreProvider fresh = provider();
      StateStore f = store(fresh, ver);
      dump("fresh provider v" + ver, f, "default");
      f.abort();
      fresh.close();
    }
    StateStore old1 = store(p, 1);
    dump("older v1 on the same provider", old1, "default");
    op("write on top of v1: put 0", () -> { old1.put(row(DEFAULT_KEY, 0), row(DEFAULT_VALUE, 0L), "default"); return null; });
    commit(old1);
    for (long ver = 1; ver <= 2; ver++) {
      StateStoreProvider fresh = provider();
      StateStore f = store(fresh, ver);
      dump("fresh provider after rewriting v2: v" + ver, f, "default");
      f.abort();
      fresh.close();
    }
    StateStoreProvider fresh = provider();
    StateStore f = store(fresh, 2);
    op("fresh provider: put 5 on v2", () -> { f.put(row(DEFAULT_KEY, 5), row(DEFAULT_VALUE, 55L), "default"); return null; });
    commit(f);
    fresh.close();
    StateStoreProvider fresh2 = provider();
    StateStore f2 = store(fresh2, 3);
    dump("second fresh provider v3", f2, "default");
    f2.abort();
  }

  void run(String scenario) throws Exception {
    String[] all = {"multivalue", "colfamilies", "scans", "versions"};
    for (String name : scenario.equals("all") ? all : new String[] {scenario}) {
      scenarioDir = name;
      countNote = "";
      opId = 0;
      line("### scenario " + name);
      switch (name) {
        case "multivalue" -> multiValue();
        case "colfamilies" -> columnFamilies();
        case "scans" -> scans();
        case "versions" -> versions();
        default -> throw new IllegalArgumentException("unknown scenario " + name);
      }
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
      System.err.println("usage: ApiScenario <provider class> <checkpoint root> <scenario|all>");
      System.exit(2);
    }
    ApiScenario s = new ApiScenario(args[0], new File(args[1]));
    s.run(args[2]);
    s.printAndExit();
  }
}
