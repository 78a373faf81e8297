package io.statestore.spark;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * What the API scenarios (ApiScenario for Spark 4's contract, ApiScenarioSpark35 for 3.5's) share: rows, their
 * printing, and a transcript of operations, each line an operation and its result or ERR. Uses only Spark classes
 * every line has alike.
 */
abstract class ApiTranscript {
  private final StringBuilder out = new StringBuilder();

  static StructType schema(Object... nameTypes) {
    List<StructField> fields = new ArrayList<>();
    for (int i = 0; i < nameTypes.length; i += 2) {
      fields.add(DataTypes.createStructField((String) nameTypes[i], (DataType) nameTypes[i + 1], true));
    }
    return DataTypes.createStructType(fields);
  }

  static UnsafeRow row(StructType schema, Object... values) {
    Object[] vs = new Object[values.length];
    for (int i = 0; i < values.length; i++) vs[i] = values[i] instanceof String s ? UTF8String.fromString(s) : values[i];
    return UnsafeProjection.create(schema).apply(new GenericInternalRow(vs)).copy();
  }

  static String show(UnsafeRow r, StructType schema) {
    if (r == null) return "null";
    StringBuilder b = new StringBuilder("(");
    StructField[] fields = schema.fields();
    for (int i = 0; i < fields.length; i++) {
      if (i > 0) b.append(",");
      b.append(r.isNullAt(i) ? "null" : String.valueOf(r.get(i, fields[i].dataType())));
    }
    return b.append(")").toString();
  }

  void line(String s) {
    out.append(s).append('\n');
  }

  interface Action {
    Object run() throws Exception;
  }

  /** How a line's scenario reports an operation it cannot run there (null: none). */
  String absence(Exception e) {
    return null;
  }

  /** Runs one operation, printing its result, or ERR when it throws (the exception classes may differ). */
  void op(String what, Action a) {
    try {
      Object r = a.run();
      line(what + (r == null ? "" : " -> " + r));
    } catch (Exception e) {
      String absent = absence(e);
      line(what + " -> " + (absent != null ? absent : "ERR"));
      if (absent == null && System.getenv("API_SCENARIO_TRACE") != null) e.printStackTrace();
    }
  }

  /** Prints the transcript and exits (the providers' threads must not keep the JVM up). */
  void printAndExit() {
    System.out.print(out);
    System.out.flush();
    System.exit(0);
  }
}
