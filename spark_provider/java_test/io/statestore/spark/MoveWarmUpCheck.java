package io.statestore.spark;

import java.io.File;
import org.apache.spark.SparkConf;

/**
 * MoveWarmUp's effect on the JIT, for tests/test_move_warm_up.py: {@code warm|cold DIR}. With {@code warm} the
 * executor's warm-up runs first; then, as on an executor after many batches, a hundred thousand calls on a store
 * loaded the usual way (the store's methods get compiled with the profile they saw), then one batch on a store
 * whose last increment is pending, as a moved partition's first batch is. The test reads the JVM's compilation
 * log for traps in the store's path. Prints the JVM's uptime in ms when the pending store comes, then {@code done}.
 */
public final class MoveWarmUpCheck {
  public static void main(String[] args) throws Exception {
    boolean warm = args[0].equals("warm");
    File dir = new File(args[1]);
    ProviderSettings settings = ProviderSettings.from(
        new SparkConf().set("spark.sql.streaming.stateStore.statestore.localDir", dir.getPath()));
    if (warm && !MoveWarmUp.run(settings)) throw new AssertionError("the warm-up did not run through");
    LocalStore local = LocalStore.open(new File(dir, "store"), "check", settings);
    for (int round = 0; round < 25; round++) MoveWarmUp.direct(local, round, 4000);
    // The JVM's uptime when the moved partition's batch starts: the test counts the traps after it.
    System.out.println("pending store at " + java.lang.management.ManagementFactory.getRuntimeMXBean().getUptime());
    MoveWarmUp.overlaid(local, 0);
    local.close();
    System.out.println("done");
  }
}
