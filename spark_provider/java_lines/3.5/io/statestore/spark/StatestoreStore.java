package io.statestore.spark;

import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreMetrics;
import org.apache.spark.sql.execution.streaming.state.UnsafeRowPair;

/**
 * Spark 3.5's {@code StateStore} over a {@link StoreSession}: one key-value space (no column families, lists or
 * merges: 3.5 has none), kept in the core's default column family.
 */
public final class StatestoreStore implements StateStore {
  private static final String CF = LocalStore.DEFAULT_CF;
  private final StatestoreProvider provider;
  private final StoreSession session;
  private final RowCodec codec;

  StatestoreStore(StatestoreProvider provider, StoreSession session, RowCodec codec) {
    this.provider = provider;
    this.session = session;
    this.codec = codec;
  }

  @Override
  public StateStoreId id() {
    return provider.stateStoreId();
  }

  @Override
  public long version() {
    return session.version();
  }

  @Override
  public UnsafeRow get(UnsafeRow key) {
    return codec.decodeValue(session.read(CF, codec.encodeKey(key)));
  }

  @Override
  public void put(UnsafeRow key, UnsafeRow value) {
    session.checkWritable("put");
    if (key == null || value == null) throw new IllegalArgumentException("put needs a key and a value");
    session.put("put", CF, codec.encodeKey(key), codec.encodeValue(value));
  }

  @Override
  public void remove(UnsafeRow key) {
    session.checkWritable("remove");
    session.remove(CF, codec.encodeKey(key));
  }

  @Override
  public scala.collection.Iterator<UnsafeRowPair> iterator() {
    return Scala.iterator(session.scan(CF, codec, null, null, null, false));
  }

  @Override
  public scala.collection.Iterator<UnsafeRowPair> prefixScan(UnsafeRow prefix) {
    return Scala.iterator(session.scan(CF, codec, codec.encodePrefix(prefix), null, null, false));
  }

  @Override
  public long commit() {
    return session.commit();
  }

  @Override
  public void abort() {
    session.abort();
  }

  @Override
  public boolean hasCommitted() {
    return session.hasCommitted();
  }

  @Override
  public StateStoreMetrics metrics() {
    scala.collection.immutable.Map<org.apache.spark.sql.execution.streaming.state.StateStoreCustomMetric, Object>
        custom = Scala.map(session.customMetrics());
    return new StateStoreMetrics(session.keyCount(), session.memoryBytes(), custom);
  }

  @Override
  public String toString() {
    return session.toString();
  }
}
