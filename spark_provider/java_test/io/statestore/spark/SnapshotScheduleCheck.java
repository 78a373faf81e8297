package io.statestore.spark;

/**
 * Prints, for every partition below the first argument, every loaded version below the second and
 * minDeltasForSnapshot the third, the versions the provider's schedule snapshots when it commits the next
 * {@code 3 * minDeltasForSnapshot} versions after that load: {@code PARTITION LOADED V1 V2 ...}, for
 * tests/test_snapshot_schedule.py.
 */
public final class SnapshotScheduleCheck {
  public static void main(String[] args) {
    int partitions = Integer.parseInt(args[0]);
    int loads = Integer.parseInt(args[1]);
    int every = Integer.parseInt(args[2]);
    StringBuilder out = new StringBuilder();
    for (int partition = 0; partition < partitions; partition++) {
      SnapshotSchedule schedule = new SnapshotSchedule(partition, every);
      for (long loaded = 0; loaded < loads; loaded++) {
        out.append(partition).append(' ').append(loaded);
        long last = schedule.slotAtOrBelow(loaded);
        for (long version = loaded + 1; version <= loaded + 3L * every; version++) {
          if (schedule.due(version, last)) {
            out.append(' ').append(version);
            last = schedule.slotAtOrBelow(version);
          }
        }
        out.append('\n');
      }
    }
    System.out.print(out);
  }
}
