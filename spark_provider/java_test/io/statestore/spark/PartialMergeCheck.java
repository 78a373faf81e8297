package io.statestore.spark;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.streaming.state.NoPrefixKeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreConf;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import org.rocksdb.RocksIterator;

/**
 * Partial-state merge (DESIGN.md section 4) through the provider's own code, beside a real state node and without
 * Spark's scheduler: tests/test_partial_merge.py and bench/partial_merge_bench.py write a partition's history,
 * hand the node a replica at the last version but one, and run a batch on the last version with that increment
 * held back (fault point {@code last-increment}, {@code delay}), with partial merge on or off.
 *
 * <p>Usage:
 * <ul>
 *   <li>{@code history <root> <partition> <local dir> small <versions>}: versions of a default column family
 *       (string key, string value) and a multi-value one, {@code list}, with puts, removes and merge operands;
 *       keys {@code s0..s9} are written at version 1 only;</li>
 *   <li>{@code history <root> <partition> <local dir> bulk <versions> <keys>}: the default column family only;
 *       version {@code u} puts the keys {@code k<i>} with {@code i % 2 == u % 2} (100-byte values);</li>
 *   <li>{@code batch <runs file>}: one run a line, tab-separated: label, state root, partition, local dir, node
 *       socket, version, partialMerge (true/false), faults file, fault lines ({@code ;} between lines, {@code -}: none),
 *       script file, dump
 *       file ({@code -}: none). Each run arms the faults file, loads the version, runs the script, commits, writes the store's RocksDB
 *       contents (every column family, bookkeeping included: one {@code cf key value} line a record, hex) to the
 *       dump file, and prints one line an event: {@code run=<label> ev=<event> ...}, times in microseconds
 *       since just before the load.</li>
 * </ul>
 *
 * <p>Script lines: {@code create-list} (registers the {@code list} column family, as an operator does at the
 * start of a batch), {@code put|merge <cf> <key> <value>}, {@code putList|mergeList <cf> <key> <v1,v2,..>},
 * {@code remove <cf> <key>}, {@code get|values|exists <cf> <key>}, {@code scan <cf>}, {@code blind <n> <prefix>}
 * (n puts of fresh keys), {@code rmw <n> <prefix>} (n gets then puts of keys prefix0..; both report {@code
 * <n>,first=<when the first write returned>}), {@code cpu <micros>} (busy work before each row of those: the
 * task's own computation), {@code after-failure}
 * (if the commit fails: abort, then load the same version again and report it).
 */
public final class PartialMergeCheck {
  private PartialMergeCheck() {}

  static final StructType KEY = schema("k");
  static final StructType VALUE = schema("v");
  static final StructType LIST_VALUE = schema("x");

  private static StructType schema(String field) {
    return DataTypes.createStructType(new org.apache.spark.sql.types.StructField[] {
        DataTypes.createStructField(field, DataTypes.StringType, true)});
  }

  private static final java.util.Map<StructType, UnsafeProjection> PROJECTIONS = new java.util.HashMap<>();

  static UnsafeRow row(StructType schema, String value) {
    return PROJECTIONS.computeIfAbsent(schema, UnsafeProjection::create)
        .apply(new GenericInternalRow(new Object[] {UTF8String.fromString(value)})).copy();
  }

  private static StructType valueSchema(String cf) {
    return "list".equals(cf) ? LIST_VALUE : VALUE;
  }

  private static String show(UnsafeRow r) {
    return r == null ? "null" : r.getUTF8String(0).toString();
  }

  private static StatestoreProvider provider(String root, int partition, String localDir, String socket,
      boolean partialMerge, String faultsFile) {
    SQLConf sql = new SQLConf();
    sql.setConfString(ProviderSettings.PREFIX + "localDir", localDir);
    if (socket == null) {
      sql.setConfString(ProviderSettings.PREFIX + "replicationFactor", "0");
    } else {
      sql.setConfString(ProviderSettings.PREFIX + "nodeSocket", socket);
      sql.setConfString(ProviderSettings.PREFIX + "replicationFactor", "1");
      sql.setConfString(ProviderSettings.PREFIX + "peerFetch", "never");
    }
    sql.setConfString(ProviderSettings.PREFIX + "partialMerge", Boolean.toString(partialMerge));
    if (faultsFile != null) sql.setConfString(ProviderSettings.PREFIX + "faultsFile", faultsFile);
    StateStoreConf conf = new StateStoreConf(sql, scala.collection.immutable.Map$.MODULE$.empty());
    StatestoreProvider provider = new StatestoreProvider();
    provider.init(new StateStoreId(root, 0, partition, "default"), KEY, VALUE, new NoPrefixKeyStateEncoderSpec(KEY),
        true, conf, new Configuration(), false, scala.Option.empty());
    return provider;
  }

  private static void createList(StateStore store) {
    store.createColFamilyIfAbsent("list", KEY, LIST_VALUE, new NoPrefixKeyStateEncoderSpec(KEY), true, false);
  }

  // ------------------------------------------------------------------ history

  private static void history(String root, int partition, String localDir, String flavour, int versions, int keys) {
    StatestoreProvider provider = provider(root, partition, localDir, null, false, null);
    String pad = "x".repeat(90);
    for (int u = 1; u <= versions; u++) {
      StateStore store = provider.getStore(u - 1, scala.Option.empty(), false, false);
      if (flavour.equals("bulk")) {
        for (int i = u % 2; i < keys; i += 2) store.put(row(KEY, "k" + i), row(VALUE, "v" + u + "-" + i + pad), "default");
      } else {
        createList(store);
        if (u == 1) for (int i = 0; i < 10; i++) store.put(row(KEY, "s" + i), row(VALUE, "stable" + i), "default");
        for (int i = 0; i < 20; i++) {
          if ((i + u) % 3 != 0) store.put(row(KEY, "d" + i), row(VALUE, "v" + u + "-" + i), "default");
        }
        for (int i = 0; i < 20; i++) if ((i + u) % 5 == 0) store.remove(row(KEY, "d" + i), "default");
        for (int j = 0; j < 10; j++) {
          if ((j + u) % 2 == 0) store.merge(row(KEY, "l" + j), row(LIST_VALUE, "u" + u + "-" + j), "list");
        }
        for (int j = 0; j < 10; j++) if ((j + u) % 7 == 0) store.remove(row(KEY, "l" + j), "list");
      }
      store.commit();
    }
    provider.close();
  }

  // ------------------------------------------------------------------ batches

  private static long micros(long nanos, long t0) {
    return nanos == 0 ? -1 : (nanos - t0) / 1000;
  }

  private static void out(String label, String event, String rest) {
    System.out.println("run=" + label + " ev=" + event + (rest.isEmpty() ? "" : " " + rest));
  }

  private static void batch(String[] run) throws Exception {
    String label = run[0];
    String root = run[1];
    int partition = Integer.parseInt(run[2]);
    long version = Long.parseLong(run[5]);
    boolean partialMerge = Boolean.parseBoolean(run[6]);
    String faultsFile = run[7];
    String faultLine = run[8];
    List<String> script = Files.readAllLines(new File(run[9]).toPath(), StandardCharsets.UTF_8);
    File dump = run[10].equals("-") ? null : new File(run[10]);
    StatestoreProvider provider = provider(root, partition, run[3], run[4], partialMerge, faultsFile);
    if (!faultLine.equals("-")) {
      Files.writeString(new File(faultsFile).toPath(), String.join("\n", faultLine.split(";")) + "\n");
    }

    long t0 = System.nanoTime();
    batchStart = t0;
    StateStore store = provider.getStore(version, scala.Option.empty(), false, false);
    long loaded = System.nanoTime();
    StateLoader.Loaded load = provider.lastLoad();
    out(label, "load", "end=" + micros(loaded, t0) + " source=" + load.source().label() + " from=" + load.fromVersion()
        + " partial=" + (load.pending() != null));
    boolean afterFailure = false;
    for (int i = 0; i < script.size(); i++) {
      String[] w = script.get(i).trim().split(" ");
      if (w[0].isEmpty()) continue;
      if (w[0].equals("after-failure")) {
        afterFailure = true;
        continue;
      }
      long start = System.nanoTime();
      String result;
      try {
        result = op(store, w);
      } catch (RuntimeException e) {
        result = "ERROR:" + e.getClass().getSimpleName();
      }
      long end = System.nanoTime();
      out(label, "op", "i=" + i + " kind=" + w[0] + " start=" + micros(start, t0) + " end=" + micros(end, t0)
          + " result=" + result);
    }
    long commitStart = System.nanoTime();
    try {
      long committed = store.commit();
      out(label, "commit", "start=" + micros(commitStart, t0) + " end=" + micros(System.nanoTime(), t0) + " version="
          + committed);
    } catch (RuntimeException e) {
      out(label, "commit_failed", "end=" + micros(System.nanoTime(), t0) + " message=" + oneLine(e));
      store.abort();
      reportPending(label, load, t0);
      if (afterFailure) {
        try {
          StateStore again = provider.getStore(version, scala.Option.empty(), false, false);
          StateLoader.Loaded l = provider.lastLoad();
          out(label, "reload", "source=" + l.source().label() + " partial=" + (l.pending() != null));
          again.abort();
        } catch (RuntimeException e2) {
          out(label, "reload_failed", "message=" + oneLine(e2));
        }
      }
      provider.close();
      return;
    }
    reportPending(label, load, t0);
    if (dump != null) writeDump(provider, dump);
    out(label, "metrics", "overlayWrites=" + metric(store, "statestoreLoadOverlayWrites") + " pendingMs="
        + metric(store, "statestoreLoadIncrementPendingMs"));
    provider.close();
  }

  private static void reportPending(String label, StateLoader.Loaded load, long t0) {
    PendingIncrement p = load.pending();
    if (p == null) return;
    out(label, "pending", "decoded=" + micros(p.decodedNanos(), t0) + " applied=" + micros(p.appliedNanos(), t0)
        + " overlay=" + p.overlayWrites() + " base_reads=" + p.readsFromBase() + " waited_reads="
        + p.readsAfterApply() + " summary=" + p.summary());
  }

  private static String oneLine(Throwable e) {
    return String.valueOf(e.getMessage()).replace('\n', ' ');
  }

  private static Object metric(StateStore store, String name) {
    scala.collection.Iterator<scala.Tuple2<org.apache.spark.sql.execution.streaming.state.StateStoreCustomMetric,
        Object>> it = store.metrics().customMetrics().iterator();
    while (it.hasNext()) {
      scala.Tuple2<org.apache.spark.sql.execution.streaming.state.StateStoreCustomMetric, Object> e = it.next();
      if (e._1().name().equals(name)) return e._2();
    }
    return "absent";
  }

  /** System.nanoTime() just before the load of the batch under way. */
  private static long batchStart;
  /** Busy work per row of {@code blind} and {@code rmw}: the task's own computation besides the state store. */
  private static long cpuNanosPerRow;

  private static String op(StateStore store, String[] w) {
    String kind = w[0];
    switch (kind) {
      case "blind", "rmw" -> {
        int n = Integer.parseInt(w[1]);
        long firstWrite = 0;
        for (int i = 0; i < n; i++) {
          for (long until = System.nanoTime() + cpuNanosPerRow; System.nanoTime() < until; ) {
            Thread.onSpinWait();
          }
          UnsafeRow k = row(KEY, w[2] + i);
          String v = "w" + i;
          if (kind.equals("rmw")) {
            UnsafeRow old = store.get(k, "default");
            String was = old == null ? "" : old.getUTF8String(0).toString();
            v = was.substring(0, Math.min(8, was.length())) + "+" + i;
          }
          store.put(k, row(VALUE, v), "default");
          if (i == 0) firstWrite = System.nanoTime();
        }
        return n + ",first=" + micros(firstWrite, batchStart);
      }
      case "cpu" -> {
        cpuNanosPerRow = Long.parseLong(w[1]) * 1000;
        return "ok";
      }
      case "create-list" -> {
        createList(store);
        return "ok";
      }
      case "scan" -> {
        List<String> seen = new ArrayList<>();
        var it = store.iteratorWithMultiValues(w[1]);
        while (it.hasNext()) {
          var pair = it.next();
          seen.add(show(pair.key()) + "=" + show(pair.value()));
        }
        it.close();
        java.util.Collections.sort(seen);
        return String.join(",", seen);
      }
      default -> { }
    }
    String cf = w[1];
    UnsafeRow key = row(KEY, w[2]);
    return switch (kind) {
      case "put" -> {
        store.put(key, row(valueSchema(cf), w[3]), cf);
        yield "ok";
      }
      case "merge" -> {
        store.merge(key, row(valueSchema(cf), w[3]), cf);
        yield "ok";
      }
      case "putList", "mergeList" -> {
        String[] vs = w[3].split(",");
        UnsafeRow[] rows = new UnsafeRow[vs.length];
        for (int i = 0; i < vs.length; i++) rows[i] = row(valueSchema(cf), vs[i]);
        if (kind.equals("putList")) store.putList(key, rows, cf);
        else store.mergeList(key, rows, cf);
        yield "ok";
      }
      case "remove" -> {
        store.remove(key, cf);
        yield "ok";
      }
      case "get" -> show(store.get(key, cf));
      case "exists" -> Boolean.toString(store.keyExists(key, cf));
      case "values" -> {
        List<String> vs = new ArrayList<>();
        scala.collection.Iterator<UnsafeRow> it = store.valuesIterator(key, cf);
        while (it.hasNext()) vs.add(show(it.next()));
        yield "[" + String.join(",", vs) + "]";
      }
      default -> throw new IllegalArgumentException("unknown script line: " + String.join(" ", w));
    };
  }

  /** The provider's local RocksDB as it is now: every column family, bookkeeping included, in key order. */
  private static void writeDump(StatestoreProvider provider, File file) throws Exception {
    java.lang.reflect.Field f = ProviderCore.class.getDeclaredField("local");
    f.setAccessible(true);
    LocalStore local = (LocalStore) f.get(provider);
    java.util.TreeSet<String> cfs = new java.util.TreeSet<>(local.columnFamilies());
    cfs.add(LocalStore.META_CF);
    StringBuilder b = new StringBuilder();
    for (String cf : cfs) {
      try (RocksIterator it = local.iterator(cf)) {
        for (it.seekToFirst(); it.isValid(); it.next()) {
          b.append(cf).append(' ').append(hex(it.key())).append(' ').append(hex(it.value())).append('\n');
        }
      }
    }
    Files.writeString(file.toPath(), b.toString());
  }

  private static String hex(byte[] bytes) {
    StringBuilder b = new StringBuilder(bytes.length * 2);
    for (byte x : bytes) b.append(Character.forDigit((x >> 4) & 0xf, 16)).append(Character.forDigit(x & 0xf, 16));
    return b.toString();
  }

  public static void main(String[] args) throws Exception {
    // Code generation of the row projections, once, before anything is timed.
    for (StructType s : List.of(KEY, VALUE, LIST_VALUE)) row(s, "warm-up");
    switch (args[0]) {
      case "history" -> history(args[1], Integer.parseInt(args[2]), args[3], args[4], Integer.parseInt(args[5]),
          args.length > 6 ? Integer.parseInt(args[6]) : 0);
      case "batch" -> {
        for (String line : Files.readAllLines(new File(args[1]).toPath(), StandardCharsets.UTF_8)) {
          if (!line.isBlank()) batch(line.split("\t"));
        }
      }
      default -> throw new IOException("unknown mode " + args[0]);
    }
    System.out.flush();
  }
}
