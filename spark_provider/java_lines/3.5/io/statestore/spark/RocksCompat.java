package io.statestore.spark;

import org.rocksdb.ColumnFamilyHandle;
import org.rocksdb.Holder;
import org.rocksdb.RocksDB;
import org.rocksdb.RocksDBException;

/** The RocksDB JNI calls whose form differs between the lines' rocksdbjni releases: Spark 3.5's 8.3, which has no
 * keyExists. */
final class RocksCompat {
  private RocksCompat() {}

  /** Whether {@code key} holds a value in column family {@code h}: the bloom filters and memtables first
   * (keyMayExist), a read only when they cannot tell. */
  static boolean keyExists(RocksDB db, ColumnFamilyHandle h, byte[] key) {
    Holder<byte[]> found = new Holder<>();
    if (!db.keyMayExist(h, key, found)) return false;
    if (found.getValue() != null) return true;
    try {
      return db.get(h, key) != null;
    } catch (RocksDBException e) {
      throw new IllegalStateException("statestore: reading a key of " + h + " failed: " + e.getMessage(), e);
    }
  }
}
