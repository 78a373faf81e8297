package io.statestore.spark;

import org.apache.spark.sql.execution.streaming.state.RocksDBStateEncoder;
import org.apache.spark.sql.types.StructType;

/** Spark 3.5's row codec: one key-value space whose keys' first {@code numColsPrefixKey} columns are a scan
 * prefix (Spark 3.5's own encoder orders them), or plain keys when none. */
final class RowCodecs {
  private RowCodecs() {}

  static RowCodec of(StructType keySchema, StructType valueSchema, int numColsPrefixKey) {
    RowCodec.KeyEncoder encoder = null;
    if (numColsPrefixKey > 0) {
      RocksDBStateEncoder spark = RocksDBStateEncoder.getEncoder(keySchema, valueSchema, numColsPrefixKey);
      encoder = RowCodec.KeyEncoder.of(spark::encodeKey, spark::decodeKey, spark.supportPrefixKeyScan(),
          spark::encodePrefixKey);
    }
    return new RowCodec(keySchema.length(), valueSchema.length(), false, encoder);
  }
}
