package io.statestore.spark;

import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.Iterator;
import java.util.NoSuchElementException;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.streaming.state.UnsafeRowPair;
import org.rocksdb.RocksIterator;

/**
 * Walks one column family in key order, optionally within a prefix or [from, until), decoding rows as it
 * goes; with {@code flatten} a multi-value entry yields one pair per value. Closes its native iterator
 * when exhausted or closed. The pair object is reused, as Spark's own providers do.
 */
final class ScanIterator implements Iterator<UnsafeRowPair>, AutoCloseable {
  private final RocksIterator it;
  private final RowCodec codec;
  private final byte[] prefix;
  private final byte[] until;
  private final boolean flatten;
  private final UnsafeRowPair pair = new UnsafeRowPair(null, null);
  private final ArrayDeque<UnsafeRow> pendingValues = new ArrayDeque<>();
  private UnsafeRow pendingKey;
  private boolean closed;

  ScanIterator(RocksIterator it, RowCodec codec, byte[] prefix, byte[] from, byte[] until, boolean flatten) {
    this.it = it;
    this.codec = codec;
    this.prefix = prefix;
    this.until = until;
    this.flatten = flatten;
    if (prefix != null) it.seek(prefix);
    else if (from != null) it.seek(from);
    else it.seekToFirst();
  }

  private boolean positionedOnMatch() {
    if (closed || !it.isValid()) return false;
    if (prefix == null && until == null) return true;
    byte[] k = it.key();
    if (prefix != null && !LocalStore.startsWith(k, prefix)) return false;
    return until == null || Arrays.compareUnsigned(k, until) < 0;
  }

  @Override
  public boolean hasNext() {
    if (!pendingValues.isEmpty()) return true;
    while (true) {
      if (!positionedOnMatch()) {
        close();
        return false;
      }
      if (!flatten) return true;
      byte[] key = it.key();
      byte[] value = it.value();
      it.next();
      pendingValues.addAll(codec.decodeValues(value));
      if (!pendingValues.isEmpty()) {
        pendingKey = codec.decodeKey(key);
        return true;
      }
    }
  }

  @Override
  public UnsafeRowPair next() {
    if (!hasNext()) throw new NoSuchElementException();
    if (flatten) return pair.withRows(pendingKey, pendingValues.poll());
    byte[] key = it.key();
    byte[] value = it.value();
    it.next();
    return pair.withRows(codec.decodeKey(key), codec.decodeValue(value));
  }

  @Override
  public void close() {
    if (!closed) {
      closed = true;
      it.close();
    }
  }
}
