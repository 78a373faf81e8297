package io.statestore.spark;

import java.util.UUID;
import org.apache.spark.SparkContext;
import org.apache.spark.SparkEnv;
import org.apache.spark.scheduler.TaskSchedulerImpl;
import org.apache.spark.sql.execution.streaming.state.StateStoreCoordinatorRef;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreProviderId;

/**
 * The driver's levers on Spark's task placement for state store partitions, called by the driver link
 * ({@link DriverLink}) for the controller, and by benchmarks through py4j, with strings and numbers only
 * (reflecting over {@code SparkEnv} from Python kills the application, DESIGN.md section 6).
 *
 * <p>Spark places a stateful task where the {@code StateStoreCoordinator} last saw its partition loaded, and
 * never forgets a lost executor there: the next batch's tasks keep preferring it and wait out the locality
 * delay. {@link #steer} reports the partition active on the executor chosen instead (one holding a warm replica),
 * so the next batch prefers that one.
 */
public final class Steering {
  private Steering() {}

  /**
   * The executors Spark is decommissioning now, comma-separated: dynamic allocation's scale-down, a worker or
   * executor decommissioned by hand, with {@code spark.decommission.enabled}. They run no new task and exit once
   * idle (about a second later), and Spark posts no listener event until they are gone: this is polled ("" for
   * a null {@code sc}).
   */
  static String decommissioningExecutors(SparkContext sc) {
    if (sc == null || !(sc.taskScheduler() instanceof TaskSchedulerImpl scheduler)) return "";
    synchronized (scheduler) { // Spark updates the map under the scheduler's lock
      return String.join(",",
          scala.collection.JavaConverters.setAsJavaSetConverter(scheduler.executorsPendingDecommission().keySet())
              .asJava());
    }
  }

  /**
   * Reports state store partition ({@code stateRoot}, {@code operatorId}, {@code partitionId}, {@code storeName})
   * of query run {@code runId} active on executor {@code executorId} at {@code host}, so that the next batch's
   * task prefers that executor. Returns the coordinator's location for it afterwards
   * ({@code executor_<host>_<id>}).
   */
  public static String steer(String stateRoot, int operatorId, int partitionId, String storeName, String runId,
      String host, String executorId) {
    StateStoreProviderId id = providerId(stateRoot, operatorId, partitionId, storeName, runId);
    StateStoreCoordinatorRef coordinator = coordinator();
    coordinator.reportActiveInstance(id, host, executorId, scala.collection.immutable.List$.MODULE$.empty());
    scala.Option<String> location = coordinator.getLocation(id);
    return location.isDefined() ? location.get() : "";
  }

  /** Where the coordinator places the partition now ("" when nowhere). */
  public static String location(String stateRoot, int operatorId, int partitionId, String storeName,
      String runId) {
    scala.Option<String> location = coordinator().getLocation(
        providerId(stateRoot, operatorId, partitionId, storeName, runId));
    return location.isDefined() ? location.get() : "";
  }

  private static StateStoreProviderId providerId(String stateRoot, int operatorId, int partitionId,
      String storeName, String runId) {
    return new StateStoreProviderId(new StateStoreId(stateRoot, operatorId, partitionId, storeName),
        UUID.fromString(runId));
  }

  private static StateStoreCoordinatorRef coordinator() {
    SparkEnv env = SparkEnv.get();
    if (env == null) throw new IllegalStateException("statestore steering: no SparkEnv in this JVM");
    return StateStoreCoordinatorRef.forExecutor(env);
  }
}
