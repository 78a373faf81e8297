package io.statestore.spark;

import org.apache.spark.sql.execution.streaming.state.KeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.NoPrefixKeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.RocksDBKeyStateEncoder;
import org.apache.spark.sql.execution.streaming.state.UnsafeRowDataEncoder;
import org.apache.spark.sql.types.StructType;

/** Spark 4's row codecs: a column family's schemas and key encoder spec, as its provider's init and
 * createColFamilyIfAbsent pass them. */
final class RowCodecs {
  private RowCodecs() {}

  static RowCodec of(StructType keySchema, StructType valueSchema, KeyStateEncoderSpec spec, boolean multiValue) {
    RowCodec.KeyEncoder encoder = null;
    if (spec != null && !(spec instanceof NoPrefixKeyStateEncoderSpec)) {
      RocksDBKeyStateEncoder spark = spec.toEncoder(new UnsafeRowDataEncoder(spec, valueSchema), false);
      encoder = RowCodec.KeyEncoder.of(spark::encodeKey, spark::decodeKey, spark.supportPrefixKeyScan(),
          spark::encodePrefixKey);
    }
    return new RowCodec(keySchema.length(), valueSchema.length(), multiValue, encoder);
  }
}
