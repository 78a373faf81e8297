package io.statestore.spark;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Function;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;

/**
 * Turns one column family's rows into stored bytes. Plain keys are the UnsafeRow bytes; keys of prefix and
 * range scans use Spark's own key encoders (a {@link KeyEncoder} over the line's, made by its {@code RowCodecs})
 * so that byte order matches scan order. Multi-value entries are framed as {@code u32 length + bytes}
 * (formats.md 2, "Merge values").
 */
final class RowCodec {
  /** A Spark line's key encoder for prefix and range scans. */
  interface KeyEncoder {
    byte[] encodeKey(UnsafeRow key);

    UnsafeRow decodeKey(byte[] bytes);

    boolean supportsPrefixScan();

    byte[] encodePrefix(UnsafeRow prefix);

    /** A key encoder of a line's own encoder's methods (each line's encoder class differs, not its methods). */
    static KeyEncoder of(Function<UnsafeRow, byte[]> encodeKey, Function<byte[], UnsafeRow> decodeKey,
        boolean supportsPrefixScan, Function<UnsafeRow, byte[]> encodePrefix) {
      return new KeyEncoder() {
        @Override
        public byte[] encodeKey(UnsafeRow key) {
          return encodeKey.apply(key);
        }

        @Override
        public UnsafeRow decodeKey(byte[] bytes) {
          return decodeKey.apply(bytes);
        }

        @Override
        public boolean supportsPrefixScan() {
          return supportsPrefixScan;
        }

        @Override
        public byte[] encodePrefix(UnsafeRow prefix) {
          return encodePrefix.apply(prefix);
        }
      };
    }
  }

  final int keyFields;
  final int valueFields;
  final boolean multiValue;
  private final KeyEncoder keyEncoder;

  /** {@code keyEncoder}: null for plain keys (no prefix or range scan). */
  RowCodec(int keyFields, int valueFields, boolean multiValue, KeyEncoder keyEncoder) {
    this.keyFields = keyFields;
    this.valueFields = valueFields;
    this.multiValue = multiValue;
    this.keyEncoder = keyEncoder;
  }

  boolean supportsPrefixScan() {
    return keyEncoder != null && keyEncoder.supportsPrefixScan();
  }

  /** Bytes owned by the caller (never a row's backing array, which Spark reuses). */
  byte[] encodeKey(UnsafeRow key) {
    return keyEncoder == null ? ownBytes(key) : keyEncoder.encodeKey(key);
  }

  byte[] encodePrefix(UnsafeRow prefix) {
    if (keyEncoder == null || !keyEncoder.supportsPrefixScan()) {
      throw new UnsupportedOperationException("prefix scan needs a PrefixKeyScanStateEncoderSpec");
    }
    return keyEncoder.encodePrefix(prefix);
  }

  UnsafeRow decodeKey(byte[] bytes) {
    if (keyEncoder != null) return keyEncoder.decodeKey(bytes);
    UnsafeRow row = new UnsafeRow(keyFields);
    row.pointTo(bytes, bytes.length);
    return row;
  }

  byte[] encodeValue(UnsafeRow value) {
    return multiValue ? frame(value) : ownBytes(value);
  }

  byte[] encodeValues(UnsafeRow[] values) {
    int total = 0;
    for (UnsafeRow v : values) total += 4 + v.getSizeInBytes();
    ByteBuffer b = ByteBuffer.allocate(total);
    for (UnsafeRow v : values) {
      b.putInt(v.getSizeInBytes());
      v.writeToMemory(b.array(), org.apache.spark.unsafe.Platform.BYTE_ARRAY_OFFSET + b.position());
      b.position(b.position() + v.getSizeInBytes());
    }
    return b.array();
  }

  /** The stored value as a row; for a multi-value entry, its first value. */
  UnsafeRow decodeValue(byte[] bytes) {
    if (bytes == null) return null;
    if (!multiValue) return row(bytes, 0, bytes.length);
    if (bytes.length < 4) return null;
    int len = ByteBuffer.wrap(bytes).getInt(0);
    return row(bytes, 4, len);
  }

  List<UnsafeRow> decodeValues(byte[] bytes) {
    List<UnsafeRow> out = new ArrayList<>();
    if (bytes == null) return out;
    if (!multiValue) {
      out.add(row(bytes, 0, bytes.length));
      return out;
    }
    ByteBuffer b = ByteBuffer.wrap(bytes);
    int pos = 0;
    while (pos + 4 <= bytes.length) {
      int len = b.getInt(pos);
      out.add(row(bytes, pos + 4, len));
      pos += 4 + len;
    }
    return out;
  }

  private UnsafeRow row(byte[] bytes, int offset, int len) {
    UnsafeRow row = new UnsafeRow(valueFields);
    row.pointTo(bytes, org.apache.spark.unsafe.Platform.BYTE_ARRAY_OFFSET + offset, len);
    return row;
  }

  private static byte[] frame(UnsafeRow v) {
    return new RowCodec.Framer().add(v).bytes();
  }

  static byte[] ownBytes(UnsafeRow row) {
    byte[] b = row.getBytes();
    return b == row.getBaseObject() ? b.clone() : b;
  }

  /** Frames values one after another. */
  private static final class Framer {
    private byte[] out = new byte[0];

    Framer add(UnsafeRow v) {
      int n = v.getSizeInBytes();
      byte[] next = java.util.Arrays.copyOf(out, out.length + 4 + n);
      ByteBuffer.wrap(next, out.length, 4).putInt(n);
      v.writeToMemory(next, org.apache.spark.unsafe.Platform.BYTE_ARRAY_OFFSET + out.length + 4);
      out = next;
      return this;
    }

    byte[] bytes() {
      return out;
    }
  }
}
