package io.statestore.spark;

import java.util.ArrayList;
import java.util.List;

/** One commit's changes in the shape of docs/formats.md section 3: a column-family table and records. */
public final class Increment {
  public static final byte PUT = IncrementLayout.OP_PUT;
  public static final byte DELETE = IncrementLayout.OP_DELETE;
  public static final byte MERGE = IncrementLayout.OP_MERGE;
  public static final byte DROP_COLUMN_FAMILY = IncrementLayout.OP_DROP_COLUMN_FAMILY;

  /** An entry of the column-family table. */
  public static final class CfEntry {
    public final String name;
    public final boolean exists;
    public final long keyCount;

    public CfEntry(String name, boolean exists, long keyCount) {
      this.name = name;
      this.exists = exists;
      this.keyCount = keyCount;
    }
  }

  public final String storeId;
  public final long version;
  public final long baseVersion;
  /** Lineage of the base version (formats.md 3.4); null: not known. */
  public byte[] parentLineage;
  /** Lineage of the version produced: set when encoded or decoded (null for a format 1 file). */
  public byte[] lineage;
  public final List<CfEntry> cfTable = new ArrayList<>();
  // Records as parallel columns, as the body stores them.
  public byte[] ops = new byte[16];
  public short[] cfIndex = new short[16];
  public byte[][] keys = new byte[16][];
  public byte[][] values = new byte[16][];
  public int size;
  /** Records still in a commit's change set, in its own columns (ChangeSet), after the records above. */
  final List<Segment> segments = new ArrayList<>();

  /** A column family's records in a change set. */
  record Segment(int cf, ChangeSet.CfChanges changes) {}

  public Increment(String storeId, long version, long baseVersion) {
    this.storeId = storeId;
    this.version = version;
    this.baseVersion = baseVersion;
  }

  public int addCf(String name, boolean exists, long keyCount) {
    cfTable.add(new CfEntry(name, exists, keyCount));
    return cfTable.size() - 1;
  }

  /** Appends column family {@code cf}'s records of a change set (none when it holds no live record). */
  void addSegment(int cf, ChangeSet.CfChanges changes) {
    if (changes != null && changes.live() > 0) segments.add(new Segment(cf, changes));
  }

  /** Every record: those added one by one and those of the segments. */
  public int records() {
    int n = size;
    for (Segment s : segments) n += s.changes().live();
    return n;
  }

  public void add(byte op, int cf, byte[] key, byte[] value) {
    if (size == ops.length) {
      int n = size * 2;
      ops = java.util.Arrays.copyOf(ops, n);
      cfIndex = java.util.Arrays.copyOf(cfIndex, n);
      keys = java.util.Arrays.copyOf(keys, n);
      values = java.util.Arrays.copyOf(values, n);
    }
    ops[size] = op;
    cfIndex[size] = (short) cf;
    keys[size] = key;
    values[size] = value;
    size++;
  }
}
