package io.statestore.spark;

/**
 * The versions at which a partition's provider snapshots: those {@code v} with {@code v + phase} a multiple of
 * {@code minDeltasForSnapshot}, the phase being the partition id modulo it. A query's partitions commit in
 * lockstep: without phases of their own they would all snapshot after the same micro-batch, whose successor then
 * runs beside every executor's flush and upload at once (on the migration bench, every task of that micro-batch
 * 1.5x slower); with them, each micro-batch carries the snapshots of about {@code partitions /
 * minDeltasForSnapshot} partitions.
 *
 * <p>The slots depend on the version alone, not on when the provider loaded: a partition that moved (hand-over,
 * failover, restart) keeps its slot. Counting from the loaded version instead put the partitions a migration moved
 * into the slots of others (three snapshots in one micro-batch of the migration bench, 0.4 core-seconds).
 */
final class SnapshotSchedule {
  private final long every;
  private final long phase;

  SnapshotSchedule(int partition, int minDeltasForSnapshot) {
    this.every = Math.max(1, minDeltasForSnapshot);
    this.phase = Math.floorMod(partition, this.every);
  }

  /** The latest slot at or below {@code version}. */
  long slotAtOrBelow(long version) {
    return version - Math.floorMod(version + phase, every);
  }

  /** Whether the commit of {@code version} is due a snapshot, {@code lastSlot} being the slot of the last one taken
   * or of the version loaded. A snapshot skipped (the previous one still uploading) is due at the next commit. */
  boolean due(long version, long lastSlot) {
    return version - lastSlot >= every;
  }
}
