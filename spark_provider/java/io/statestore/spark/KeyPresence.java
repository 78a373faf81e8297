package io.statestore.spark;

import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;

/**
 * Whether keys a task read existed, remembered until the store's committed version changes: Spark reads a key
 * through its read store and writes it later through the write store (an aggregation's restore and save), and a
 * write must know whether the key existed for the exact count. Remembering the read spares a second lookup in
 * RocksDB per write. Bounded: past {@link #MAX_BYTES} of keys it remembers nothing more (lookups then say unknown).
 *
 * <p>An answer is the key's presence in the committed version only while the batch has not written the key: the
 * caller asks the change set first (docs/performance.md).
 */
final class KeyPresence {
  static final int UNKNOWN = -1;
  static final int ABSENT = 0;
  static final int PRESENT = 1;
  private static final long MAX_BYTES = 64L << 20;

  /** One column family's keys: an open-addressing table over key bytes kept in one buffer. */
  private static final class Table {
    private int[] offset = new int[256];
    private int[] length = new int[256];
    private int[] hashes = new int[256];
    private byte[] present = new byte[256];
    private byte[] data = new byte[8 * 1024];
    private int dataLen;
    private int entries;
    private int[] slots = new int[512];

    private int slotOf(byte[] key, int hash) {
      int mask = slots.length - 1;
      for (int s = hash & mask; ; s = (s + 1) & mask) {
        int e = slots[s] - 1;
        if (e < 0) return s;
        if (hashes[e] == hash && length[e] == key.length
            && Arrays.equals(data, offset[e], offset[e] + key.length, key, 0, key.length)) {
          return s;
        }
      }
    }

    int lookup(byte[] key, int hash) {
      int e = slots[slotOf(key, hash)] - 1;
      return e < 0 ? UNKNOWN : present[e];
    }

    void note(byte[] key, int hash, boolean exists) {
      int s = slotOf(key, hash);
      int e = slots[s] - 1;
      if (e >= 0) {
        present[e] = (byte) (exists ? PRESENT : ABSENT);
        return;
      }
      if (entries == offset.length) {
        int n = entries * 2;
        offset = Arrays.copyOf(offset, n);
        length = Arrays.copyOf(length, n);
        hashes = Arrays.copyOf(hashes, n);
        present = Arrays.copyOf(present, n);
      }
      if (dataLen + key.length > data.length) data = Arrays.copyOf(data, Math.max(dataLen + key.length, 2 * data.length));
      System.arraycopy(key, 0, data, dataLen, key.length);
      e = entries++;
      offset[e] = dataLen;
      length[e] = key.length;
      hashes[e] = hash;
      present[e] = (byte) (exists ? PRESENT : ABSENT);
      dataLen += key.length;
      slots[s] = e + 1;
      if (2 * entries > slots.length) rehash();
    }

    private void rehash() {
      slots = new int[slots.length * 2];
      int mask = slots.length - 1;
      for (int e = 0; e < entries; e++) {
        int s = hashes[e] & mask;
        while (slots[s] != 0) s = (s + 1) & mask;
        slots[s] = e + 1;
      }
    }
  }

  private final Map<String, Table> byCf = new HashMap<>();
  private long bytes;

  static int hash(byte[] key) {
    int h = Arrays.hashCode(key) * 0x9E3779B9;
    return h ^ (h >>> 16);
  }

  /** {@link #PRESENT}, {@link #ABSENT} or {@link #UNKNOWN} (never read, or forgotten). */
  int lookup(String cf, byte[] key) {
    Table t = byCf.get(cf);
    return t == null ? UNKNOWN : t.lookup(key, hash(key));
  }

  /** Remembers what a read of {@code key} found. */
  void note(String cf, byte[] key, boolean exists) {
    if (bytes + key.length + 24 > MAX_BYTES) return;
    bytes += key.length + 24;
    byCf.computeIfAbsent(cf, n -> new Table()).note(key, hash(key), exists);
  }

  /** Forgets everything: the committed version changed, or the batch's writes were undone. */
  void clear() {
    if (bytes == 0) return;
    byCf.clear();
    bytes = 0;
  }
}
