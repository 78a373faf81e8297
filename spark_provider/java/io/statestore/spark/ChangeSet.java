package io.statestore.spark;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The changes of the commit in progress, reduced to at most one record per key (formats.md 3.2): the increment
 * is written from here, so commit never scans the database.
 *
 * <p>Kept in the increment body's own shape while the batch writes (docs/performance.md): per column family,
 * records in arrival order as columns (op, key length, value length) with their key and value bytes one after
 * the other in one buffer, and an open-addressing index from key to its live record. A key written again has its
 * earlier record marked dead and a new one appended, so a write costs one probe and two copies, no objects; and a
 * commit whose keys were each written once copies the columns and the bytes into the body in bulk.
 */
final class ChangeSet {
  /** A key with a cached hash, usable as a map key (for readers of increments that collect touched keys). */
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

  /** A record slot no longer live: the same key was written again later in the commit. */
  private static final byte DEAD = 0;

  /** Dead records' bytes kept before a family's records are compacted (and only while they outweigh the live). */
  static final int COMPACT_AFTER_DEAD_BYTES = 1 << 20;

  /** One column family's records (see the class comment). */
  static final class CfChanges {
    private byte[] ops = new byte[256];
    private int[] keyLen = new int[256];
    /** Value length; a DELETE has none (0, as the body stores it). */
    private int[] valueLen = new int[256];
    /** Where the record's key starts in {@link #data}; its value follows the key. */
    private int[] offset = new int[256];
    private int[] hashes = new int[256];
    private byte[] data = new byte[16 * 1024];
    private int dataLen;
    private int records;
    private int dead;
    /** Key and value bytes of the dead records, reclaimed by {@link #compact}. */
    private long deadBytes;
    /** Open addressing: record index + 1 of the live record of a key, 0 for an empty slot. */
    private int[] slots = new int[512];
    /** The op of the key's live record before the last write ({@link #DEAD}: none). */
    byte previousOp;
    /** Records before this one are in the database already (LocalStore writes them before a scan or a merge). */
    private int written;

    int live() {
      return records - dead;
    }

    private static int hash(byte[] key) {
      int h = Arrays.hashCode(key) * 0x9E3779B9;
      return h ^ (h >>> 16);
    }

    /** The slot holding {@code key}'s live record, or the empty slot where it would go. */
    private int slotOf(byte[] key, int hash) {
      int mask = slots.length - 1;
      for (int s = hash & mask; ; s = (s + 1) & mask) {
        int r = slots[s] - 1;
        if (r < 0) return s;
        if (hashes[r] == hash && keyLen[r] == key.length
            && Arrays.equals(data, offset[r], offset[r] + key.length, key, 0, key.length)) {
          return s;
        }
      }
    }

    /** The value bytes of record {@code r}. */
    private byte[] value(int r) {
      int from = offset[r] + keyLen[r];
      return Arrays.copyOfRange(data, from, from + valueLen[r]);
    }

    /** Writes {@code op} of {@code key} (value null for a delete); returns the bytes it added net. */
    long write(byte op, byte[] key, byte[] value) {
      int h = hash(key);
      int s = slotOf(key, h);
      long freed = 0;
      int previous = slots[s] - 1;
      previousOp = previous >= 0 ? ops[previous] : DEAD;
      if (previous >= 0) {
        freed = keyLen[previous] + valueLen[previous];
        ops[previous] = DEAD;
        dead++;
        deadBytes += freed;
      }
      int r = append(op, key, value, h);
      slots[s] = r + 1;
      if (previous < 0 && 2 * live() > slots.length) rehash();
      // A batch that rewrites its keys (a list state appended row by row, a key updated per input row) would
      // otherwise keep every superseded value until the commit.
      if (deadBytes > COMPACT_AFTER_DEAD_BYTES && deadBytes > dataLen - deadBytes) compact();
      return key.length + (value == null ? 0 : value.length) - freed;
    }

    /**
     * Drops the dead records, keeping the live ones in order. New arrays, never rewritten in place: a write batch
     * taken before ({@link #addUnwritten}) may still read the old ones. Records already in the database stay
     * counted as written.
     */
    private void compact() {
      int n = live();
      int capacity = Math.max(256, Integer.highestOneBit(Math.max(1, n)) << 1);
      byte[] ops2 = new byte[capacity];
      int[] keyLen2 = new int[capacity];
      int[] valueLen2 = new int[capacity];
      int[] offset2 = new int[capacity];
      int[] hashes2 = new int[capacity];
      int liveBytes = (int) (dataLen - deadBytes);
      byte[] data2 = new byte[Math.max(16 * 1024, liveBytes + liveBytes / 2)];
      int w = 0;
      int at = 0;
      int written2 = 0;
      for (int r = 0; r < records; r++) {
        if (ops[r] == DEAD) continue;
        int length = keyLen[r] + valueLen[r];
        System.arraycopy(data, offset[r], data2, at, length);
        ops2[w] = ops[r];
        keyLen2[w] = keyLen[r];
        valueLen2[w] = valueLen[r];
        offset2[w] = at;
        hashes2[w] = hashes[r];
        if (r < written) written2++;
        at += length;
        w++;
      }
      ops = ops2;
      keyLen = keyLen2;
      valueLen = valueLen2;
      offset = offset2;
      hashes = hashes2;
      data = data2;
      dataLen = at;
      records = w;
      written = written2;
      dead = 0;
      deadBytes = 0;
      indexLive(slots.length);
    }

    /** Bytes this family's records hold, the dead ones' included (what compaction bounds). */
    int heldBytes() {
      return dataLen;
    }

    /** The op of {@code key}'s live record ({@link #DEAD}: the commit did not write it). */
    byte current(byte[] key) {
      int r = slots[slotOf(key, hash(key))] - 1;
      return r < 0 ? DEAD : ops[r];
    }

    /** The value of {@code key}'s live record (null when it has none). */
    byte[] valueOf(byte[] key) {
      int r = slots[slotOf(key, hash(key))] - 1;
      return r < 0 ? null : value(r);
    }

    /**
     * Adds the live puts and deletes not in the database yet to {@code batch}, as column family {@code cfId}, and
     * counts them as written. Merges are left out: LocalStore writes a merge's result at once.
     */
    void addUnwritten(SortedWriteBatch batch, int cfId) {
      int n = 0;
      int[] which = new int[records - written];
      for (int r = written; r < records; r++) {
        if (ops[r] == Increment.PUT || ops[r] == Increment.DELETE) which[n++] = r;
      }
      written = records;
      if (n > 0) batch.add(cfId, new SortedWriteBatch.Records(data, offset, keyLen, valueLen, ops), Arrays.copyOf(which, n));
    }

    /** Appends an operand (formats.md 3.2): a put or delete earlier in this commit turns into a put of the result. */
    long merge(byte[] key, byte[] operand) {
      int r = slots[slotOf(key, hash(key))] - 1;
      if (r < 0) return write(Increment.MERGE, key, operand);
      if (ops[r] == Increment.DELETE) return write(Increment.PUT, key, operand);
      return write(ops[r], key, ChangeSet.concat(value(r), operand));
    }

    private int append(byte op, byte[] key, byte[] value, int h) {
      if (records == ops.length) {
        int n = records * 2;
        ops = Arrays.copyOf(ops, n);
        keyLen = Arrays.copyOf(keyLen, n);
        valueLen = Arrays.copyOf(valueLen, n);
        offset = Arrays.copyOf(offset, n);
        hashes = Arrays.copyOf(hashes, n);
      }
      int v = value == null ? 0 : value.length;
      long need = (long) dataLen + key.length + v;
      if (need > data.length) {
        if (need > Integer.MAX_VALUE - 64) throw new IllegalStateException("changes of one commit over 2 GiB");
        data = Arrays.copyOf(data, (int) Math.min(Integer.MAX_VALUE - 64, Math.max(need, 2L * data.length)));
      }
      System.arraycopy(key, 0, data, dataLen, key.length);
      if (v > 0) System.arraycopy(value, 0, data, dataLen + key.length, v);
      int r = records++;
      ops[r] = op;
      keyLen[r] = key.length;
      valueLen[r] = v;
      offset[r] = dataLen;
      hashes[r] = h;
      dataLen += key.length + v;
      return r;
    }

    private void rehash() {
      indexLive(slots.length * 2);
    }

    /** A new index of {@code size} slots over the live records. */
    private void indexLive(int size) {
      slots = new int[size];
      int mask = slots.length - 1;
      for (int r = 0; r < records; r++) {
        if (ops[r] == DEAD) continue;
        int s = hashes[r] & mask;
        while (slots[s] != 0) s = (s + 1) & mask;
        slots[s] = r + 1;
      }
    }

    /** The keys of the live records. */
    List<byte[]> keys() {
      List<byte[]> out = new ArrayList<>(live());
      for (int r = 0; r < records; r++) {
        if (ops[r] != DEAD) out.add(Arrays.copyOfRange(data, offset[r], offset[r] + keyLen[r]));
      }
      return out;
    }

    /** Bytes of the live records' keys and values. */
    long liveDataBytes() {
      if (dead == 0) return dataLen;
      long n = 0;
      for (int r = 0; r < records; r++) if (ops[r] != DEAD) n += keyLen[r] + valueLen[r];
      return n;
    }

    void putOps(ByteBuffer body) {
      if (dead == 0) {
        body.put(ops, 0, records);
        return;
      }
      for (int r = 0; r < records; r++) if (ops[r] != DEAD) body.put(ops[r]);
    }

    void putCfIndex(ByteBuffer body, short cf) {
      for (int i = live(); i > 0; i--) body.putShort(cf);
    }

    void putKeyLengths(ByteBuffer body) {
      putLengths(body, keyLen);
    }

    void putValueLengths(ByteBuffer body) {
      putLengths(body, valueLen);
    }

    private void putLengths(ByteBuffer body, int[] lengths) {
      if (dead == 0) {
        body.asIntBuffer().put(lengths, 0, records);
        body.position(body.position() + 4 * records);
        return;
      }
      for (int r = 0; r < records; r++) if (ops[r] != DEAD) body.putInt(lengths[r]);
    }

    void putData(ByteBuffer body) {
      if (dead == 0) {
        body.put(data, 0, dataLen);
        return;
      }
      for (int r = 0; r < records; r++) {
        if (ops[r] != DEAD) body.put(data, offset[r], keyLen[r] + valueLen[r]);
      }
    }
  }

  private final Map<String, CfChanges> byCf = new LinkedHashMap<>();
  private final Set<String> dropped = new LinkedHashSet<>();
  private final Set<String> created = new LinkedHashSet<>();
  private long bytes;

  private CfChanges cf(String name) {
    return byCf.computeIfAbsent(name, n -> new CfChanges());
  }

  /**
   * Records a put (the key and value are copied: the caller keeps its arrays); returns the op of the key's
   * record before it, 0 when the commit had not written the key.
   */
  byte put(String cf, byte[] key, byte[] value) {
    CfChanges c = cf(cf);
    bytes += c.write(Increment.PUT, key, value);
    return c.previousOp;
  }

  void delete(String cf, byte[] key) {
    bytes += cf(cf).write(Increment.DELETE, key, null);
  }

  /** The op of {@code key}'s record in this commit, 0 when the commit has not written it. */
  byte current(String cf, byte[] key) {
    CfChanges c = byCf.get(cf);
    return c == null ? DEAD : c.current(key);
  }

  /** The value of {@code key}'s record in this commit (null when it has none, or it is a delete). */
  byte[] value(String cf, byte[] key) {
    CfChanges c = byCf.get(cf);
    return c == null ? null : c.valueOf(key);
  }

  /**
   * The puts and deletes not in the database yet, in key order per column family ({@code cfIds} gives each
   * family's RocksDB id), now counted as written; null when there are none.
   */
  SortedWriteBatch takeUnwritten(java.util.function.ToIntFunction<String> cfIds) {
    SortedWriteBatch batch = new SortedWriteBatch();
    for (Map.Entry<String, CfChanges> e : byCf.entrySet()) e.getValue().addUnwritten(batch, cfIds.applyAsInt(e.getKey()));
    return batch.isEmpty() ? null : batch;
  }

  /** Appends an operand: a put or delete earlier in this commit turns into a put of the result. */
  void merge(String cf, byte[] key, byte[] operand) {
    bytes += cf(cf).merge(key, operand);
  }

  /** Forgets the keys of a dropped column family; the drop itself leads the increment. */
  void dropCf(String cf) {
    CfChanges m = byCf.remove(cf);
    if (m != null) bytes -= m.liveDataBytes();
    if (!created.remove(cf)) dropped.add(cf);
  }

  void createCf(String cf) {
    created.add(cf);
    cf(cf);
  }

  boolean isEmpty() {
    return byCf.isEmpty() && dropped.isEmpty();
  }

  long approxBytes() {
    return bytes;
  }

  /** Bytes the records of every family hold, superseded ones included. */
  long heldBytes() {
    long n = 0;
    for (CfChanges c : byCf.values()) n += c.heldBytes();
    return n;
  }

  Set<String> droppedCfs() {
    return dropped;
  }

  Set<String> touchedCfs() {
    return byCf.keySet();
  }

  Set<String> createdCfs() {
    return created;
  }

  /** The keys this commit changed in column family {@code cf}. */
  List<byte[]> keys(String cf) {
    CfChanges m = byCf.get(cf);
    return m == null ? new ArrayList<>() : m.keys();
  }

  /**
   * The increment of these changes; {@code counts} gives each column family's exact key count after the commit.
   * Its records stay here (the increment's segments): encode it before this change set is cleared.
   */
  Increment toIncrement(String storeId, long version, java.util.function.ToLongFunction<String> counts) {
    Increment inc = new Increment(storeId, version, version - 1);
    for (String cf : dropped) {
      if (byCf.containsKey(cf)) continue; // dropped then re-created: the re-creation wins below
      int idx = inc.addCf(cf, false, 0);
      inc.add(Increment.DROP_COLUMN_FAMILY, idx, new byte[0], null);
    }
    for (Map.Entry<String, CfChanges> e : byCf.entrySet()) {
      String cf = e.getKey();
      int idx = inc.addCf(cf, true, counts.applyAsLong(cf));
      if (dropped.contains(cf)) inc.add(Increment.DROP_COLUMN_FAMILY, idx, new byte[0], null);
    }
    for (int idx = 0; idx < inc.cfTable.size(); idx++) {
      Increment.CfEntry entry = inc.cfTable.get(idx);
      if (entry.exists) inc.addSegment(idx, byCf.get(entry.name));
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
