package io.statestore.spark;

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import org.rocksdb.RocksIterator;

/**
 * Runs the operations of standard input on a LocalStore in the directory named by the first argument, one a
 * line, and prints what each read finds, for tests/test_local_store.py to compare with a model:
 * {@code put CF KEY VALUE}, {@code delete CF KEY}, {@code merge CF KEY OPERAND}, {@code create CF},
 * {@code get CF KEY} (prints the value or {@code -}), {@code list CF} (prints {@code KEY=VALUE ...} in key order),
 * {@code scan CF} (prints the entries' number and the CRC-32 of each key and value, 4-byte big-endian length
 * first, in key order),
 * {@code count CF}, {@code begin}, {@code commit} (its writes on a writer thread), {@code commit inline} (its writes
 * left to the next use of the store), {@code rollback}, {@code reopen} (closes the store and opens
 * its directory again), {@code mirror CF} (like {@code scan}, of the mirror). Keys and values in hex.
 *
 * <p>The mirror is a second store, in the directory named by the second argument, to which every commit's
 * increment is applied once encoded and decoded, as a load catching up applies it.
 */
public final class LocalStoreCheck {
  public static void main(String[] args) throws Exception {
    File dir = new File(args[0]);
    ProviderSettings settings = ProviderSettings.from(new org.apache.spark.SparkConf(false));
    LocalStore store = LocalStore.open(dir, "0/0/default", settings);
    LocalStore mirror = LocalStore.open(new File(args[1]), "0/0/default", settings);
    HexFormat hex = HexFormat.of();
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    StringBuilder out = new StringBuilder();
    for (String line = in.readLine(); line != null; line = in.readLine()) {
      String[] w = line.trim().split(" ");
      switch (w[0]) {
        case "put" -> store.put(w[1], hex.parseHex(w[2]), hex.parseHex(w.length > 3 ? w[3] : ""), KeyPresence.UNKNOWN);
        case "delete" -> store.delete(w[1], hex.parseHex(w[2]));
        case "merge" -> store.merge(w[1], hex.parseHex(w[2]), hex.parseHex(w[3]));
        case "create" -> store.createColumnFamily(w[1]);
        case "get" -> {
          byte[] v = store.read(w[1], hex.parseHex(w[2]));
          out.append(v == null ? "-" : hex.formatHex(v)).append('\n');
        }
        case "scan", "mirror" -> {
          java.util.zip.CRC32 crc = new java.util.zip.CRC32();
          long n = 0;
          try (RocksIterator it = (w[0].equals("scan") ? store : mirror).iterator(w[1])) {
            for (it.seekToFirst(); it.isValid(); it.next(), n++) {
              for (byte[] b : new byte[][] {it.key(), it.value()}) {
                crc.update(java.nio.ByteBuffer.allocate(4).putInt(b.length).array());
                crc.update(b);
              }
            }
          }
          out.append(n).append(' ').append(crc.getValue()).append('\n');
        }
        case "list" -> {
          StringBuilder s = new StringBuilder();
          try (RocksIterator it = store.iterator(w[1])) {
            for (it.seekToFirst(); it.isValid(); it.next()) {
              s.append(hex.formatHex(it.key())).append('=').append(hex.formatHex(it.value())).append(' ');
            }
          }
          out.append(s.toString().trim()).append('\n');
        }
        case "count" -> out.append(store.count(w[1])).append('\n');
        case "begin" -> store.beginBatch();
        case "commit" -> {
          Increment inc = store.prepareCommit();
          byte[] encoded = IncrementCodec.encode(inc, 1);
          store.finishCommit(inc);
          mirror.apply(IncrementCodec.decode(encoded, "increment " + inc.version), "increment " + inc.version);
          if (w.length == 1) store.startWrites(); // as the provider does; "commit inline": the next use writes
        }
        case "rollback" -> {
          if (!store.rollback()) throw new IllegalStateException("rollback refused");
        }
        case "reopen" -> {
          store.close();
          store = LocalStore.open(dir, "0/0/default", settings);
          out.append("version ").append(store.version()).append('\n');
        }
        default -> throw new IllegalArgumentException("unknown line: " + line);
      }
    }
    store.close();
    mirror.close();
    System.out.print(out);
  }
}
