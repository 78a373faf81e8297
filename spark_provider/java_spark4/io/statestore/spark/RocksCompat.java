package io.statestore.spark;

import org.rocksdb.ColumnFamilyHandle;
import org.rocksdb.RocksDB;

/** The RocksDB JNI calls whose form differs between the lines' rocksdbjni releases: Spark 4's 9.x. */
final class RocksCompat {
  private RocksCompat() {}

  /** Whether {@code key} holds a value in column family {@code h}, without copying the value out. */
  static boolean keyExists(RocksDB db, ColumnFamilyHandle h, byte[] key) {
    return db.keyExists(h, key);
  }
}
