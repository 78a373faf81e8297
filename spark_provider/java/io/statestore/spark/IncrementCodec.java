package io.statestore.spark;

import com.github.luben.zstd.Zstd;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.zip.CRC32;

/** Encodes and decodes increments exactly as docs/formats.md section 3 lays them out. */
public final class IncrementCodec {
  // The codes are IncrementLayout's, generated from protos/contract/increment.toml with the Python codec's.
  private static final byte[] MAGIC = IncrementLayout.MAGIC.getBytes(StandardCharsets.US_ASCII);
  private static final byte[] END_MAGIC = IncrementLayout.END_MAGIC.getBytes(StandardCharsets.US_ASCII);
  private static final int FORMAT_VERSION = IncrementLayout.FORMAT_VERSION;
  private static final int FLAG_ZSTD = IncrementLayout.FLAG_ZSTD;
  private static final int TRAILER = 8;
  /** Bytes of a lineage (formats.md 3.4). */
  public static final int LINEAGE_BYTES = IncrementLayout.LINEAGE_BYTES;
  /** The lineage of version 0, the empty store. */
  public static final byte[] EMPTY_LINEAGE = new byte[LINEAGE_BYTES];
  private static final byte[] UNKNOWN_LINEAGE = unknownLineage();

  private static byte[] unknownLineage() {
    byte[] b = new byte[LINEAGE_BYTES];
    java.util.Arrays.fill(b, (byte) 0xff);
    return b;
  }

  /** The identity part of an increment's header (formats.md 3.4); lineages null when not known. */
  public record Header(String storeId, long version, byte[] parentLineage, byte[] lineage) {}

  private IncrementCodec() {}

  private static boolean readable(int formatVersion) {
    for (int v : IncrementLayout.READABLE_FORMAT_VERSIONS) if (v == formatVersion) return true;
    return false;
  }

  /** The file's bytes; {@code zstdLevel <= 0} stores the body uncompressed. */
  public static byte[] encode(Increment inc, int zstdLevel) {
    int n = inc.records();
    int own = inc.size; // the records added one by one come first, then the change set's segments
    long dataLen = 0;
    for (int i = 0; i < own; i++) {
      dataLen += inc.keys[i].length + (inc.values[i] == null ? 0 : inc.values[i].length);
    }
    for (Increment.Segment s : inc.segments) dataLen += s.changes().liveDataBytes();
    long rawLen = (long) n * 11 + dataLen;
    if (rawLen > Integer.MAX_VALUE - 64) {
      throw new IllegalStateException("increment body too large: " + rawLen + " bytes");
    }
    ByteBuffer body = ByteBuffer.allocate((int) rawLen);
    body.put(inc.ops, 0, own);
    for (Increment.Segment s : inc.segments) s.changes().putOps(body);
    for (int i = 0; i < own; i++) body.putShort(inc.cfIndex[i]);
    for (Increment.Segment s : inc.segments) s.changes().putCfIndex(body, (short) s.cf());
    for (int i = 0; i < own; i++) body.putInt(inc.keys[i].length);
    for (Increment.Segment s : inc.segments) s.changes().putKeyLengths(body);
    for (int i = 0; i < own; i++) body.putInt(inc.values[i] == null ? 0 : inc.values[i].length);
    for (Increment.Segment s : inc.segments) s.changes().putValueLengths(body);
    for (int i = 0; i < own; i++) {
      body.put(inc.keys[i]);
      if (inc.values[i] != null) body.put(inc.values[i]);
    }
    for (Increment.Segment s : inc.segments) s.changes().putData(body);
    byte[] raw = body.array();
    byte[] stored = zstdLevel > 0 ? Zstd.compress(raw, zstdLevel) : raw;

    byte[] id = utf8(inc.storeId);
    ByteBuffer h = ByteBuffer.allocate(4 + 2 + 2 + 2 + id.length + 16 + LINEAGE_BYTES);
    h.put(MAGIC).putShort((short) FORMAT_VERSION).putShort((short) (zstdLevel > 0 ? FLAG_ZSTD : 0));
    h.putShort((short) id.length).put(id);
    h.putLong(inc.version).putLong(inc.baseVersion);
    h.put(inc.parentLineage == null ? UNKNOWN_LINEAGE : inc.parentLineage);
    byte[] before = h.array();

    ByteArrayOutputStream rest = new ByteArrayOutputStream(32 + inc.cfTable.size() * 24);
    ByteBuffer counts = ByteBuffer.allocate(6).putInt(n).putShort((short) inc.cfTable.size());
    rest.write(counts.array(), 0, 6);
    for (Increment.CfEntry e : inc.cfTable) {
      byte[] name = utf8(e.name);
      ByteBuffer c = ByteBuffer.allocate(2 + name.length + 9);
      c.putShort((short) name.length).put(name).put(e.exists ? IncrementLayout.CF_EXISTS : IncrementLayout.CF_DROPPED)
          .putLong(e.keyCount);
      rest.write(c.array(), 0, c.position());
    }
    ByteBuffer lens = ByteBuffer.allocate(16).putLong(stored.length).putLong(raw.length);
    rest.write(lens.array(), 0, 16);
    byte[] afterHead = rest.toByteArray();

    MessageDigest sha = sha256();
    sha.update(before);
    sha.update(afterHead);
    sha.update(stored);
    inc.lineage = java.util.Arrays.copyOf(sha.digest(), LINEAGE_BYTES);

    int size = before.length + LINEAGE_BYTES + afterHead.length + stored.length + TRAILER;
    byte[] out = new byte[size];
    int at = 0;
    System.arraycopy(before, 0, out, at, before.length);
    at += before.length;
    System.arraycopy(inc.lineage, 0, out, at, LINEAGE_BYTES);
    at += LINEAGE_BYTES;
    System.arraycopy(afterHead, 0, out, at, afterHead.length);
    at += afterHead.length;
    System.arraycopy(stored, 0, out, at, stored.length);
    at += stored.length;
    CRC32 crc = new CRC32();
    crc.update(out, 0, at);
    ByteBuffer t = ByteBuffer.wrap(out, at, TRAILER);
    t.putInt((int) crc.getValue()).put(END_MAGIC);
    return out;
  }

  private static MessageDigest sha256() {
    try {
      return MessageDigest.getInstance("SHA-256");
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("this JVM has no SHA-256", e); // every JDK has it
    }
  }

  /**
   * The store, version and lineages from the first bytes of an increment file (the lineage fields end within
   * {@code 58 + store id bytes}): what tells which history a version belongs to, without reading the file.
   * Not a verification of the file.
   */
  public static Header readHeader(byte[] prefix, String file) throws IOException {
    try {
      ByteBuffer b = ByteBuffer.wrap(prefix);
      byte[] magic = new byte[4];
      b.get(magic);
      if (!java.util.Arrays.equals(magic, MAGIC)) throw bad(file, "bad magic");
      int formatVersion = b.getShort() & 0xffff;
      if (!readable(formatVersion)) throw bad(file, "unknown format version " + formatVersion);
      b.getShort();
      String storeId = getStr(b);
      long version = b.getLong();
      b.getLong();
      if (formatVersion == 1) return new Header(storeId, version, null, null);
      byte[] parent = new byte[LINEAGE_BYTES];
      byte[] lineage = new byte[LINEAGE_BYTES];
      b.get(parent).get(lineage);
      return new Header(storeId, version, java.util.Arrays.equals(parent, UNKNOWN_LINEAGE) ? null : parent, lineage);
    } catch (java.nio.BufferUnderflowException e) {
      throw bad(file, "header shorter than its lineage fields");
    }
  }

  /** A lineage as 32 lowercase hex digits (Spark's checkpoint id with format v2), "unknown" for null. */
  public static String hex(byte[] lineage) {
    if (lineage == null) return "unknown";
    StringBuilder sb = new StringBuilder(2 * lineage.length);
    for (byte x : lineage) sb.append(String.format("%02x", x & 0xff));
    return sb.toString();
  }

  /** Parses and verifies a file's bytes in the order formats.md 3.3 prescribes; errors name {@code file}. */
  public static Increment decode(byte[] data, String file) throws IOException {
    int minimal = 4 + 2 + 2 + 2 + 8 + 8 + 4 + 2 + 16 + TRAILER; // format 1; format 2 adds the lineages
    if (data.length < minimal) throw bad(file, "truncated (" + data.length + " bytes)");
    ByteBuffer b = ByteBuffer.wrap(data);
    byte[] magic = new byte[4];
    b.get(magic);
    if (!java.util.Arrays.equals(magic, MAGIC)) throw bad(file, "bad magic");
    int formatVersion = b.getShort() & 0xffff;
    if (!readable(formatVersion)) {
      throw bad(file, "unknown format version " + formatVersion);
    }
    int flags = b.getShort() & 0xffff;
    if ((flags & ~FLAG_ZSTD) != 0) throw bad(file, "unknown flag bits " + flags);
    try {
      String storeId = getStr(b);
      long version = b.getLong();
      long base = b.getLong();
      byte[] parent = null;
      byte[] lineage = null;
      int lineageAt = -1;
      if (formatVersion >= 2) {
        parent = new byte[LINEAGE_BYTES];
        b.get(parent);
        lineageAt = b.position();
        lineage = new byte[LINEAGE_BYTES];
        b.get(lineage);
      }
      long n = b.getInt() & 0xffffffffL;
      int m = b.getShort() & 0xffff;
      Increment inc = new Increment(storeId, version, base);
      for (int i = 0; i < m; i++) {
        String name = getStr(b);
        int state = b.get();
        long count = b.getLong();
        checkColumnFamily(file, inc, name, state, count);
        inc.addCf(name, state == IncrementLayout.CF_EXISTS, count);
      }
      long storedLen = b.getLong();
      long rawLen = b.getLong();
      int bodyStart = b.position();
      byte[] endMagic = java.util.Arrays.copyOfRange(data, data.length - 4, data.length);
      if (!java.util.Arrays.equals(endMagic, END_MAGIC)) throw bad(file, "bad end magic (truncated?)");
      if (bodyStart + storedLen + TRAILER != data.length) {
        throw bad(file, "size mismatch: header announces " + (bodyStart + storedLen + TRAILER)
            + " bytes, file has " + data.length);
      }
      CRC32 crc = new CRC32();
      crc.update(data, 0, data.length - TRAILER);
      int stored = ByteBuffer.wrap(data, data.length - TRAILER, 4).getInt();
      if (stored != (int) crc.getValue()) throw bad(file, "checksum mismatch");
      if (lineage != null) {
        MessageDigest sha = sha256();
        sha.update(data, 0, lineageAt);
        sha.update(data, lineageAt + LINEAGE_BYTES, data.length - TRAILER - lineageAt - LINEAGE_BYTES);
        if (!java.util.Arrays.equals(java.util.Arrays.copyOf(sha.digest(), LINEAGE_BYTES), lineage)) {
          throw bad(file, "lineage does not match the file's bytes");
        }
        inc.parentLineage = java.util.Arrays.equals(parent, UNKNOWN_LINEAGE) ? null : parent;
        inc.lineage = lineage;
      }
      byte[] raw;
      if ((flags & FLAG_ZSTD) != 0) {
        byte[] frame = java.util.Arrays.copyOfRange(data, bodyStart, bodyStart + (int) storedLen);
        try {
          raw = Zstd.decompress(frame, (int) rawLen);
        } catch (RuntimeException e) {
          throw bad(file, "bad zstd frame: " + e.getMessage());
        }
        if (raw.length != rawLen) throw bad(file, "body_raw_len mismatch");
      } else {
        if (storedLen != rawLen) throw bad(file, "body_raw_len mismatch");
        raw = java.util.Arrays.copyOfRange(data, bodyStart, bodyStart + (int) storedLen);
      }
      parseBody(inc, raw, (int) n, file);
      return inc;
    } catch (java.nio.BufferUnderflowException | IndexOutOfBoundsException e) {
      throw bad(file, "truncated header");
    }
  }

  private static void parseBody(Increment inc, byte[] raw, int n, String file) throws IOException {
    if ((long) n * 11 > raw.length) throw bad(file, "record count exceeds body");
    ByteBuffer b = ByteBuffer.wrap(raw);
    int opsAt = 0;
    int cfAt = n;
    int keyLenAt = cfAt + 2 * n;
    int valLenAt = keyLenAt + 4 * n;
    int pos = valLenAt + 4 * n;
    for (int i = 0; i < n; i++) {
      byte op = raw[opsAt + i];
      int cf = b.getShort(cfAt + 2 * i) & 0xffff;
      long kl = b.getInt(keyLenAt + 4 * i) & 0xffffffffL;
      long vl = b.getInt(valLenAt + 4 * i) & 0xffffffffL;
      if (op < 1 || op > 4) throw bad(file, "unknown op " + op + " in record " + i);
      if (cf >= inc.cfTable.size()) throw bad(file, "column family index out of range in record " + i);
      if (pos + kl + vl > raw.length) throw bad(file, "record " + i + " lengths exceed body");
      byte[] key = java.util.Arrays.copyOfRange(raw, pos, pos + (int) kl);
      pos += (int) kl;
      byte[] value = java.util.Arrays.copyOfRange(raw, pos, pos + (int) vl);
      pos += (int) vl;
      inc.add(op, cf, key, value);
    }
    if (pos != raw.length) throw bad(file, "trailing bytes in body");
  }

  /**
   * Refuses a column-family table entry no writer produces: applied, it would write the store's bookkeeping,
   * count keys below zero or give one family two states.
   */
  private static void checkColumnFamily(String file, Increment inc, String name, int state, long count)
      throws IOException {
    if (name.isEmpty() || name.equals(IncrementLayout.META_COLUMN_FAMILY)) {
      throw bad(file, "column family name '" + name + "' is reserved");
    }
    if (state != IncrementLayout.CF_EXISTS && state != IncrementLayout.CF_DROPPED) {
      throw bad(file, "column family '" + name + "' has unknown state " + state);
    }
    if (count < 0) throw bad(file, "column family '" + name + "' has a negative key count " + count);
    for (Increment.CfEntry e : inc.cfTable) {
      if (e.name.equals(name)) throw bad(file, "column family '" + name + "' is listed twice");
    }
  }

  private static IOException bad(String file, String problem) {
    return new IOException("Corrupt increment " + file + ": " + problem);
  }

  private static byte[] utf8(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  private static String getStr(ByteBuffer b) {
    int len = b.getShort() & 0xffff;
    byte[] u = new byte[len];
    b.get(u);
    return new String(u, StandardCharsets.UTF_8);
  }
}
