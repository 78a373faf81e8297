package io.statestore.spark;

/**
 * Spark's checkpoint format v2 ({@code spark.sql.streaming.stateStore.checkpointFormatVersion=2}) names every
 * committed version of a store partition by a unique id, which Spark records in its commit log and passes back
 * to the next load. Ours is the version's lineage (formats.md 3.4) as 32 lowercase hex digits: two ids are
 * equal exactly when the states are, so Spark's checks and our replicas' lineage checks are one and the same.
 */
final class CheckpointIds {
  private CheckpointIds() {}

  /** The id of a version of lineage {@code lineage} (null: not known, then no id). */
  static scala.Option<String> of(byte[] lineage) {
    return lineage == null ? scala.Option.empty() : scala.Option.apply(IncrementCodec.hex(lineage));
  }

  /** The lineage Spark asks for with {@code uniqueId}, or null when it passes none. */
  static byte[] lineageOf(scala.Option<String> uniqueId, String storeId, long version) {
    if (uniqueId == null || uniqueId.isEmpty()) return null;
    String id = uniqueId.get();
    if (id.length() != 2 * IncrementCodec.LINEAGE_BYTES) throw notOurs(id, storeId, version);
    byte[] lineage = new byte[IncrementCodec.LINEAGE_BYTES];
    for (int i = 0; i < lineage.length; i++) {
      int hi = Character.digit(id.charAt(2 * i), 16);
      int lo = Character.digit(id.charAt(2 * i + 1), 16);
      if (hi < 0 || lo < 0) throw notOurs(id, storeId, version);
      lineage[i] = (byte) (hi << 4 | lo);
    }
    return lineage;
  }

  private static IllegalArgumentException notOurs(String id, String storeId, long version) {
    return new IllegalArgumentException("statestore: Spark asks for version " + version + " of store " + storeId
        + " with checkpoint id '" + id + "', which this provider did not write (its ids are 32 hex digits): was the "
        + "query's state written by another state store provider?");
  }
}
