package io.statestore.spark;

import java.io.IOException;
import java.util.List;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.streaming.state.RecordType$;
import org.apache.spark.util.NextIterator;
import scala.Enumeration;
import scala.Tuple4;

/**
 * Spark's state change feed ({@code readChangeFeed} of the state data source) served from the increments in the
 * checkpoint location: for each version {@code start..end}, every record of one column family, as
 * (record type, key, value, batch id) with batch id {@code version - 1}. A put is an {@code update}, a delete a
 * {@code delete} (value null), a merge operand of a multi-value key an {@code append} (one row per operand).
 *
 * <p>An increment holds a batch's net change per key (its last write), where Spark's changelog holds every call:
 * a key a batch wrote twice appears once here, with its final value, and a removal of a key the batch found
 * absent does not appear. Each increment is read, checksum-verified, when the feed reaches it; a missing or
 * corrupt one fails the read naming the file.
 */
final class ChangeFeed extends NextIterator<Tuple4<Enumeration.Value, UnsafeRow, UnsafeRow, Object>> {
  private final CheckpointDir checkpoint;
  private final String columnFamily;
  private final RowCodec codec;
  private final long endVersion;
  private long nextVersion;
  private Increment increment;
  private int cfOfIncrement = -1;
  private int record;
  private List<UnsafeRow> operands;
  private int operand;

  ChangeFeed(CheckpointDir checkpoint, String columnFamily, RowCodec codec, long startVersion, long endVersion) {
    this.checkpoint = checkpoint;
    this.columnFamily = columnFamily;
    this.codec = codec;
    this.nextVersion = startVersion;
    this.endVersion = endVersion;
  }

  @Override
  public Tuple4<Enumeration.Value, UnsafeRow, UnsafeRow, Object> getNext() {
    while (true) {
      if (operands != null && operand < operands.size()) {
        return row(RecordType$.MODULE$.MERGE_RECORD(), increment.keys[record - 1], operands.get(operand++));
      }
      operands = null;
      if (increment != null) {
        while (record < increment.size && increment.cfIndex[record] != cfOfIncrement) record++;
        if (record < increment.size) {
          int r = record++;
          byte op = increment.ops[r];
          if (op == Increment.PUT) {
            return row(RecordType$.MODULE$.PUT_RECORD(), increment.keys[r], codec.decodeValue(increment.values[r]));
          }
          if (op == Increment.DELETE) return row(RecordType$.MODULE$.DELETE_RECORD(), increment.keys[r], null);
          if (op == Increment.MERGE) {
            operands = codec.decodeValues(increment.values[r]);
            operand = 0;
          }
          continue; // a column family dropped: not a row of the feed
        }
        increment = null;
      }
      if (nextVersion > endVersion) {
        finished_$eq(true);
        return null;
      }
      readNext();
    }
  }

  private void readNext() {
    long v = nextVersion++;
    try {
      increment = checkpoint.readIncrement(v);
    } catch (IOException e) {
      throw new IllegalStateException("statestore: the change feed cannot read version " + v + " (batch " + (v - 1)
          + ") from " + checkpoint.incrementPath(v) + ": " + e.getMessage(), e);
    }
    cfOfIncrement = -1;
    for (int i = 0; i < increment.cfTable.size(); i++) {
      if (increment.cfTable.get(i).name.equals(columnFamily)) cfOfIncrement = i;
    }
    record = 0;
  }

  private Tuple4<Enumeration.Value, UnsafeRow, UnsafeRow, Object> row(Enumeration.Value type, byte[] key,
      UnsafeRow value) {
    return new Tuple4<>(type, codec.decodeKey(key), value, increment.version - 1);
  }

  @Override
  public void close() {
    increment = null;
  }
}
