package io.statestore.spark;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.StreamingQueryListener;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Steers a restarted query (a new run id on a checkpoint whose partitions the controller knows) before its first
 * micro-batch: Spark's coordinator places a stateful task by the run id, so a new run's first batch has no
 * preferred executor and its partitions load wherever Spark runs them. Spark calls {@code onQueryStarted} on the
 * query's own thread before that batch is planned (for the start event only, listeners run synchronously); this
 * listener tells the controller over the driver link and waits, bounded, while the controller reports each of the
 * checkpoint's partitions active on the executor that holds it (its primary's, else its freshest replica
 * holder's). A stopped run is announced too (its partitions are no longer moved). Registered by {@code spark.sql.streaming.streamingQueryListeners} (which {@code enable()} and
 * {@code statestore spark-conf} set); it does nothing without a controller the driver side started.
 */
public final class QueryStarts extends StreamingQueryListener {
  private static final Logger LOG = LoggerFactory.getLogger(QueryStarts.class);
  private static final long WAIT_MS = 10_000;

  @Override
  public void onQueryStarted(QueryStartedEvent event) {
    DriverLink link = DriverLink.current();
    if (link == null) return;
    try {
      String stateRoot = stateRoot(event);
      if (stateRoot == null) return;
      if (!link.queryStarted(event.runId().toString(), stateRoot, WAIT_MS)) {
        LOG.warn("statestore: the controller did not steer query run {} within {} ms; its first batch runs "
            + "where Spark places it", event.runId(), WAIT_MS);
      }
    } catch (RuntimeException e) { // steering is an optimisation: never fail the query's start
      LOG.warn("statestore: query run {} not steered at its start: {}", event.runId(), e.toString());
    }
  }

  /** The query's state root as its state stores name it ({@code <resolved checkpoint root>/state}). */
  private static String stateRoot(QueryStartedEvent event) {
    SparkSession session = SparkSession.active();
    StreamingQuery query = session.streams().get(event.id());
    String root = query == null ? null : resolvedCheckpointRoot(query);
    return root == null ? null : new org.apache.hadoop.fs.Path(root, "state").toString();
  }

  /** The resolved checkpoint root of a running query: the session's handle (StreamingQueryWrapper, whose package
   * differs between Spark lines) wraps the engine's StreamExecution. Null when it is not such a handle. */
  private static String resolvedCheckpointRoot(StreamingQuery query) {
    try {
      Object engine = query.getClass().getMethod("streamingQuery").invoke(query);
      return (String) engine.getClass().getMethod("resolvedCheckpointRoot").invoke(engine);
    } catch (ReflectiveOperationException | ClassCastException e) {
      return null;
    }
  }

  @Override
  public void onQueryProgress(QueryProgressEvent event) {}

  /** Tells the controller the run stopped: no move of its partitions may wait for a batch it will not run. */
  @Override
  public void onQueryTerminated(QueryTerminatedEvent event) {
    DriverLink link = DriverLink.current();
    if (link != null) link.queryStopped(event.runId().toString());
  }
}
