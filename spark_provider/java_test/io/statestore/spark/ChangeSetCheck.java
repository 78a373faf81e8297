package io.statestore.spark;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HexFormat;

/**
 * Applies the writes of standard input to a change set, one a line ({@code put CF KEYHEX VALUEHEX},
 * {@code delete CF KEYHEX}, {@code merge CF KEYHEX OPERANDHEX}, {@code create CF}, {@code drop CF},
 * {@code rewrite CF KEYHEX SIZE TIMES}, {@code flush}: prints the records taken as written), and writes
 * its increment (version 1, every key count 0) to the file named by the first argument, for
 * tests/test_change_set.py to decode and compare with a model of formats.md 3.2.
 */
public final class ChangeSetCheck {
  public static void main(String[] args) throws IOException {
    ChangeSet changes = new ChangeSet();
    HexFormat hex = HexFormat.of();
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    for (String line = in.readLine(); line != null; line = in.readLine()) {
      String[] w = line.trim().split(" ");
      switch (w[0]) {
        case "put" -> changes.put(w[1], hex.parseHex(w[2]), hex.parseHex(w.length > 3 ? w[3] : ""));
        case "delete" -> changes.delete(w[1], hex.parseHex(w[2]));
        case "merge" -> changes.merge(w[1], hex.parseHex(w[2]), hex.parseHex(w[3]));
        case "create" -> changes.createCf(w[1]);
        case "drop" -> changes.dropCf(w[1]);
        case "rewrite" -> { // rewrite CF KEYHEX SIZE TIMES: the key put TIMES times, value i of SIZE bytes (i % 251)
          byte[] key = hex.parseHex(w[2]);
          int size = Integer.parseInt(w[3]);
          for (int i = 0, times = Integer.parseInt(w[4]); i < times; i++) {
            byte[] value = new byte[size];
            java.util.Arrays.fill(value, (byte) (i % 251));
            changes.put(w[1], key, value);
          }
        }
        case "flush" -> { // as LocalStore before a scan: the records not in the database yet, then counted written
          SortedWriteBatch batch = changes.takeUnwritten(cf -> 0);
          System.out.println("unwritten " + (batch == null ? 0 : batch.count()));
        }
        default -> throw new IllegalArgumentException("unknown line: " + line);
      }
    }
    Increment inc = changes.toIncrement("0/0/default", 1, cf -> 0L);
    Files.write(Path.of(args[0]), IncrementCodec.encode(inc, args.length > 1 ? Integer.parseInt(args[1]) : 1));
    System.out.println(inc.records() + " records, " + changes.approxBytes() + " bytes");
    System.out.println("held " + changes.heldBytes());
  }
}
