package io.statestore.spark;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.lang.reflect.Method;
import java.lang.reflect.RecordComponent;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import java.util.List;

/**
 * The Java side of tests/test_contract_cross_language.py. Reads commands from standard input, one a line, and
 * prints one answer line for each:
 * <ul>
 *   <li>{@code frame HEX}: a whole frame the Python side encoded; decoded with {@link FrameCodec} and printed as
 *       {@code TYPE field=value ...} (values: decimal, quoted text, hex bytes, {@code null}), then {@code |} and the
 *       hex of the frame Java encodes from what it decoded;</li>
 *   <li>{@code increment STORE VERSION BASE CF EXISTS KEYS (OP KEY VALUE)...}: an increment built with one column
 *       family and the records given (keys and values in hex, "-" for empty), encoded uncompressed with
 *       {@link IncrementCodec}; printed as hex;</li>
 *   <li>{@code decode-increment HEX}: an increment the Python side encoded, decoded by {@link IncrementCodec} and
 *       printed as {@code store version base lineage-hex cf:exists:keys op:cf:key:value ...}.</li>
 * </ul>
 */
public final class ContractCheck {
  private static final HexFormat HEX = HexFormat.of();

  public static void main(String[] args) throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    for (String line = in.readLine(); line != null; line = in.readLine()) {
      String[] words = line.trim().split(" ");
      try {
        System.out.println(switch (words[0]) {
          case "frame" -> frame(HEX.parseHex(words[1]));
          case "increment" -> HEX.formatHex(increment(words));
          case "decode-increment" -> decodedIncrement(HEX.parseHex(words[1]));
          default -> "unknown command " + words[0];
        });
      } catch (IOException e) {
        System.out.println("error: " + e.getMessage());
      }
    }
  }

  private static String frame(byte[] whole) throws Exception {
    ByteBuffer body = ByteBuffer.wrap(whole, 5, whole.length - 5).slice();
    byte type = whole[4];
    String name = frameName(type);
    String decoder = "decode" + className(name);
    Method decode = FrameCodec.class.getDeclaredMethod(decoder, ByteBuffer.class);
    Record message;
    try {
      message = (Record) decode.invoke(null, body);
    } catch (java.lang.reflect.InvocationTargetException e) {
      if (e.getCause() instanceof IOException io) throw io;
      throw e;
    }
    Method encode = FrameCodec.class.getDeclaredMethod("encode", message.getClass());
    ByteBuffer again = (ByteBuffer) encode.invoke(null, message);
    byte[] bytes = new byte[again.remaining()];
    again.get(bytes);
    return name + " " + fields(message) + " | " + HEX.formatHex(bytes);
  }

  /** The frame type's name, from FrameCodec's byte constants. */
  private static String frameName(byte type) throws IllegalAccessException {
    for (var f : FrameCodec.class.getDeclaredFields()) {
      if (f.getType() == byte.class && f.getByte(null) == type) return f.getName();
    }
    return "UNKNOWN_" + type;
  }

  private static String className(String frameName) {
    for (var c : FrameCodec.class.getDeclaredClasses()) {
      if (!c.isRecord()) continue;
      try {
        FrameCodec.class.getDeclaredMethod("decode" + c.getSimpleName(), ByteBuffer.class);
        String snake = c.getSimpleName().replaceAll("([a-z])([A-Z])", "$1_$2").toUpperCase();
        if (snake.equals(frameName) || (snake.equals("INCOMING_REQUEST") && frameName.equals("INCOMING"))) {
          return c.getSimpleName();
        }
      } catch (NoSuchMethodException e) {
        // not a frame's record
      }
    }
    return frameName;
  }

  private static String fields(Record message) throws Exception {
    StringBuilder out = new StringBuilder();
    for (RecordComponent c : message.getClass().getRecordComponents()) {
      if (out.length() > 0) out.append(' ');
      out.append(c.getName()).append('=').append(value(c.getAccessor().invoke(message)));
    }
    return out.toString();
  }

  private static String value(Object v) throws Exception {
    if (v == null) return "null";
    if (v instanceof byte[] b) return HEX.formatHex(b);
    if (v instanceof String s) return '"' + s + '"';
    if (v instanceof List<?> list) {
      StringBuilder out = new StringBuilder("[");
      for (Object e : list) out.append(out.length() > 1 ? "; " : "").append(fields((Record) e));
      return out.append(']').toString();
    }
    return String.valueOf(v);
  }

  private static byte[] increment(String[] w) {
    Increment inc = new Increment(w[1], Long.parseLong(w[2]), Long.parseLong(w[3]));
    inc.parentLineage = IncrementCodec.EMPTY_LINEAGE;
    int cf = inc.addCf(w[4], Boolean.parseBoolean(w[5]), Long.parseLong(w[6]));
    for (int i = 7; i + 2 < w.length; i += 3) {
      byte op = switch (w[i]) {
        case "PUT" -> Increment.PUT;
        case "DELETE" -> Increment.DELETE;
        case "MERGE" -> Increment.MERGE;
        default -> Increment.DROP_COLUMN_FAMILY;
      };
      inc.add(op, cf, bytes(w[i + 1]), op == Increment.DELETE ? null : bytes(w[i + 2]));
    }
    return IncrementCodec.encode(inc, 0);
  }

  private static byte[] bytes(String hexOrDash) {
    return hexOrDash.equals("-") ? new byte[0] : HEX.parseHex(hexOrDash);
  }

  private static String decodedIncrement(byte[] data) throws IOException {
    Increment inc = IncrementCodec.decode(data, "<python bytes>");
    StringBuilder out = new StringBuilder(inc.storeId + " " + inc.version + " " + inc.baseVersion + " "
        + IncrementCodec.hex(inc.lineage));
    for (Increment.CfEntry e : inc.cfTable) out.append(' ').append(e.name + ":" + e.exists + ":" + e.keyCount);
    for (int i = 0; i < inc.size; i++) {
      byte[] value = inc.values[i];
      out.append(' ').append(inc.ops[i]).append(':').append(inc.cfIndex[i]).append(':')
          .append(HEX.formatHex(inc.keys[i])).append(':').append(value == null ? "" : HEX.formatHex(value));
    }
    return out.toString();
  }
}
