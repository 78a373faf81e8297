package io.statestore.spark;

import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The changes of the commit in progress, reduced to at most one record per key (formats.md 3.2):
 * the increment is written from here, so commit never scans the database.
 */
final class ChangeSet {
  /** A key with a cached hash, usable as a map key. */
  static final class Key {
    final byte[] bytes;
    private final int hash;

    Key(byte[] bytes) {
      this.bytes = bytes;
      this.hash = Arrays.hashCode(bytes);
    }

    @Override
    public int hashCode() {
      return hash;
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof Key k && k.hash == hash && Arrays.equals(k.bytes, bytes);
    }
  }

  /** The net change of one key. */
  static final class Change {
    byte op;
    byte[] value;

    Change(byte op, byte[] value) {
      this.op = op;
      this.value = value;
    }
  }

  private final Map<String, HashMap<Key, Change>> byCf = new LinkedHashMap<>();
  private final java.util.LinkedHashSet<String> dropped = new java.util.LinkedHashSet<>();
  private final java.util.LinkedHashSet<String> created = new java.util.LinkedHashSet<>();
  private long bytes;

  private HashMap<Key, Change> cf(String name) {
    return byCf.computeIfAbsent(name, n -> new HashMap<>());
  }

  /** The key and value arrays are owned by the change set from here on. */
  void put(String cf, byte[] key, byte[] value) {
    Change prev = cf(cf).put(new Key(key), new Change(Increment.PUT, value));
    bytes += key.length + value.length - (prev == null ? 0 : (prev.value == null ? 0 : prev.value.length));
  }

  void delete(String cf, byte[] key) {
    Change prev = cf(cf).put(new Key(key), new Change(Increment.DELETE, null));
    bytes += prev == null ? key.length : 0;
  }

  /** Appends an operand: a put or delete earlier in this commit turns into a put of the result. */
  void merge(String cf, byte[] key, byte[] operand) {
    HashMap<Key, Change> m = cf(cf);
    Key k = new Key(key);
    Change c = m.get(k);
    if (c == null) {
      m.put(k, new Change(Increment.MERGE, operand));
      bytes += key.length + operand.length;
    } else if (c.op == Increment.DELETE) {
      c.op = Increment.PUT;
      c.value = operand;
      bytes += operand.length;
    } else {
      c.value = concat(c.value, operand);
      bytes += operand.length;
    }
  }

  /** Forgets the keys of a dropped column family; the drop itself leads the increment. */
  void dropCf(String cf) {
    HashMap<Key, Change> m = byCf.remove(cf);
    if (m != null) m.clear();
    if (!created.remove(cf)) dropped.add(cf);
  }

  void createCf(String cf) {
    created.add(cf);
    byCf.computeIfAbsent(cf, n -> new HashMap<>());
  }

  boolean isEmpty() {
    return byCf.isEmpty() && dropped.isEmpty();
  }

  long approxBytes() {
    return bytes;
  }

  java.util.Set<String> droppedCfs() {
    return dropped;
  }

  java.util.Set<String> touchedCfs() {
    return byCf.keySet();
  }

  java.util.Set<String> createdCfs() {
    return created;
  }

  /** The keys this commit changed in column family {@code cf}. */
  java.util.List<byte[]> keys(String cf) {
    HashMap<Key, Change> m = byCf.get(cf);
    java.util.List<byte[]> out = new java.util.ArrayList<>(m == null ? 0 : m.size());
    if (m != null) for (Key k : m.keySet()) out.add(k.bytes);
    return out;
  }

  /** Builds the increment; {@code counts} gives each column family's exact key count after the commit. */
  Increment toIncrement(String storeId, long version, java.util.function.ToLongFunction<String> counts) {
    Increment inc = new Increment(storeId, version, version - 1);
    for (String cf : dropped) {
      if (byCf.containsKey(cf)) continue; // dropped then re-created: the re-creation wins below
      int idx = inc.addCf(cf, false, 0);
      inc.add(Increment.DROP_COLUMN_FAMILY, idx, new byte[0], null);
    }
    for (Map.Entry<String, HashMap<Key, Change>> e : byCf.entrySet()) {
      String cf = e.getKey();
      int idx = inc.addCf(cf, true, counts.applyAsLong(cf));
      if (dropped.contains(cf)) inc.add(Increment.DROP_COLUMN_FAMILY, idx, new byte[0], null);
    }
    for (int idx = 0; idx < inc.cfTable.size(); idx++) {
      Increment.CfEntry entry = inc.cfTable.get(idx);
      if (!entry.exists) continue;
      for (Map.Entry<Key, Change> c : byCf.get(entry.name).entrySet()) {
        inc.add(c.getValue().op, idx, c.getKey().bytes, c.getValue().value);
      }
    }
    return inc;
  }

  void clear() {
    byCf.clear();
    dropped.clear();
    created.clear();
    bytes = 0;
  }

  static byte[] concat(byte[] a, byte[] b) {
    if (a == null || a.length == 0) return b;
    byte[] out = Arrays.copyOf(a, a.length + b.length);
    System.arraycopy(b, 0, out, a.length, b.length);
    return out;
  }
}
