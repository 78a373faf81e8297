package io.statestore.spark;

import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.streaming.state.KeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreCheckpointInfo;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreIterator;
import org.apache.spark.sql.execution.streaming.state.StateStoreMetrics;
import org.apache.spark.sql.execution.streaming.state.UnsafeRowPair;
import org.apache.spark.sql.types.StructType;

/**
 * Spark 4's {@code StateStore} (4.0 to 4.3) over a {@link StoreSession}: rows of named column families turned
 * into stored bytes by each column family's {@link RowCodec}. Methods of one line's contract only carry no
 * {@code @Override} (spark_provider/java_lines/README.md).
 */
public final class StatestoreStore implements StateStore {
  private final StatestoreProvider provider;
  private final StoreSession session;

  StatestoreStore(StatestoreProvider provider, StoreSession session) {
    SparkLine.initStore(this);
    this.provider = provider;
    this.session = session;
  }

  @Override
  public StateStoreId id() {
    return provider.stateStoreId();
  }

  @Override
  public long version() {
    return session.version();
  }

  private RowCodec codec(String cf) {
    RowCodec c = provider.codec(cf);
    if (c == null || !session.hasColumnFamily(cf)) {
      throw new IllegalArgumentException("Column family '" + cf + "' does not exist in " + provider.storeIdString());
    }
    return c;
  }

  private RowCodec multiValueCodec(String op, String cf) {
    RowCodec c = codec(cf);
    if (!c.multiValue) throw new UnsupportedOperationException(op + " needs a multi-value column family");
    return c;
  }

  @Override
  public UnsafeRow get(UnsafeRow key, String cf) {
    RowCodec c = codec(cf);
    return c.decodeValue(session.read(cf, c.encodeKey(key)));
  }

  public boolean keyExists(UnsafeRow key, String cf) {
    return session.exists(cf, codec(cf).encodeKey(key));
  }

  @Override
  public scala.collection.Iterator<UnsafeRow> valuesIterator(UnsafeRow key, String cf) {
    RowCodec c = codec(cf);
    return Scala.iterator(c.decodeValues(session.readAll(cf, c.encodeKey(key))).iterator());
  }

  @Override
  public void put(UnsafeRow key, UnsafeRow value, String cf) {
    session.checkWritable("put");
    if (key == null || value == null) throw new IllegalArgumentException("put needs a key and a value");
    RowCodec c = codec(cf);
    session.put("put", cf, c.encodeKey(key), c.encodeValue(value));
  }

  public void putList(UnsafeRow key, UnsafeRow[] values, String cf) {
    session.checkWritable("putList");
    SparkLine.checkListAccepted("putList", values.length);
    RowCodec c = multiValueCodec("putList", cf);
    session.put("putList", cf, c.encodeKey(key), c.encodeValues(values));
  }

  @Override
  public void remove(UnsafeRow key, String cf) {
    session.checkWritable("remove");
    session.remove(cf, codec(cf).encodeKey(key));
  }

  public void deleteRange(UnsafeRow begin, UnsafeRow end, String cf) {
    session.checkWritable("deleteRange");
    RowCodec c = codec(cf);
    session.deleteRange(cf, c.encodeKey(begin), c.encodeKey(end));
  }

  @Override
  public void merge(UnsafeRow key, UnsafeRow value, String cf) {
    session.checkWritable("merge");
    RowCodec c = multiValueCodec("merge", cf);
    session.merge("merge", cf, c.encodeKey(key), c.encodeValue(value));
  }

  public void mergeList(UnsafeRow key, UnsafeRow[] values, String cf) {
    session.checkWritable("mergeList");
    SparkLine.checkListAccepted("mergeList", values.length);
    RowCodec c = multiValueCodec("mergeList", cf);
    session.merge("mergeList", cf, c.encodeKey(key), c.encodeValues(values));
  }

  private StateStoreIterator<UnsafeRowPair> scan(String cf, RowCodec c, byte[] prefix, byte[] from, byte[] until,
      boolean flatten) {
    ScanIterator s = session.scan(cf, c, prefix, from, until, flatten);
    return Scala.storeIterator(s, s::close);
  }

  @Override
  public StateStoreIterator<UnsafeRowPair> iterator(String cf) {
    return scan(cf, codec(cf), null, null, null, false);
  }

  public StateStoreIterator<UnsafeRowPair> iteratorWithMultiValues(String cf) {
    RowCodec c = codec(cf);
    return scan(cf, c, null, null, null, c.multiValue);
  }

  @Override
  public StateStoreIterator<UnsafeRowPair> prefixScan(UnsafeRow prefix, String cf) {
    RowCodec c = codec(cf);
    return scan(cf, c, c.encodePrefix(prefix), null, null, false);
  }

  public StateStoreIterator<UnsafeRowPair> prefixScanWithMultiValues(UnsafeRow prefix, String cf) {
    RowCodec c = codec(cf);
    return scan(cf, c, c.encodePrefix(prefix), null, null, c.multiValue);
  }

  public StateStoreIterator<UnsafeRowPair> rangeScan(scala.Option<UnsafeRow> start, scala.Option<UnsafeRow> end,
      String cf) {
    return rangeScan(start, end, cf, false);
  }

  public StateStoreIterator<UnsafeRowPair> rangeScanWithMultiValues(scala.Option<UnsafeRow> start,
      scala.Option<UnsafeRow> end, String cf) {
    return rangeScan(start, end, cf, true);
  }

  private StateStoreIterator<UnsafeRowPair> rangeScan(scala.Option<UnsafeRow> start, scala.Option<UnsafeRow> end,
      String cf, boolean multiValues) {
    RowCodec c = codec(cf);
    return scan(cf, c, null, start.isDefined() ? c.encodeKey(start.get()) : null,
        end.isDefined() ? c.encodeKey(end.get()) : null, multiValues && c.multiValue);
  }

  public scala.collection.immutable.Set<String> allColumnFamilyNames() {
    return Scala.set(session.columnFamilies());
  }

  @Override
  public void createColFamilyIfAbsent(String cf, StructType keySchema, StructType valueSchema,
      KeyStateEncoderSpec spec, boolean multiValue, boolean isInternal) {
    provider.registerCodec(cf, RowCodecs.of(keySchema, valueSchema, spec, multiValue));
    session.createColumnFamily(cf);
  }

  @Override
  public boolean removeColFamilyIfExists(String cf) {
    return session.dropColumnFamily(cf);
  }

  @Override
  public long commit() {
    return session.commit();
  }

  @Override
  public void abort() {
    session.abort();
  }

  public void release() {
    session.release();
  }

  @Override
  public boolean hasCommitted() {
    return session.hasCommitted();
  }

  @Override
  public StateStoreMetrics metrics() {
    scala.collection.immutable.Map<org.apache.spark.sql.execution.streaming.state.StateStoreCustomMetric, Object>
        custom = Scala.map(session.customMetrics());
    return SparkLine.storeMetrics(session.keyCount(), session.memoryBytes(), custom);
  }

  @Override
  public StateStoreCheckpointInfo getStateStoreCheckpointInfo() {
    byte[] base = session.baseLineage();
    if (session.hasCommitted()) {
      return new StateStoreCheckpointInfo(id().partitionId(), session.committedVersion(),
          CheckpointIds.of(session.committedLineage()), CheckpointIds.of(base));
    }
    return new StateStoreCheckpointInfo(id().partitionId(), session.version(), CheckpointIds.of(base),
        scala.Option.empty());
  }

  @Override
  public String toString() {
    return session.toString();
  }
}
