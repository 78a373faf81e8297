import static org.apache.spark.sql.functions.count;
import static org.apache.spark.sql.functions.sum;

import java.io.File;
import java.io.FileWriter;
import java.io.IOException;
import org.apache.spark.api.java.function.VoidFunction2;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.StreamingQueryListener;
import org.apache.spark.sql.streaming.Trigger;
import org.apache.spark.sql.types.StructType;

/**
 * A Java streaming application with no Python in it, for tests/test_spark_submit.py: per key, the count and sum
 * of the JSON records in INPUT (one file a micro-batch), each micro-batch's update-mode output written to
 * OUTPUT/batches/ID, each progress appended to PROGRESS as a JSON line; it stops once STOP exists. Whatever keeps
 * its state is chosen by the confs it is submitted with.
 */
public final class StatefulCounts {
  public static void main(String[] args) throws Exception {
    String input = args[0];
    String output = args[1];
    File progress = new File(args[2]);
    File stop = new File(args[3]);
    SparkSession spark = SparkSession.builder().appName("statestore-java-app").getOrCreate();
    spark.streams().addListener(new StreamingQueryListener() {
      @Override
      public void onQueryStarted(QueryStartedEvent event) {}

      @Override
      public void onQueryProgress(QueryProgressEvent event) {
        synchronized (progress) {
          try (FileWriter out = new FileWriter(progress, true)) {
            out.write(event.progress().json().replace('\n', ' ') + "\n");
          } catch (IOException e) {
            throw new RuntimeException(e);
          }
        }
      }

      @Override
      public void onQueryTerminated(QueryTerminatedEvent event) {}
    });
    StructType schema = new StructType().add("key", "string").add("value", "long");
    Dataset<Row> counts = spark.readStream().schema(schema).option("maxFilesPerTrigger", 1).json(input)
        .groupBy("key").agg(count("*").as("n"), sum("value").as("total"));
    StreamingQuery query = counts.writeStream().outputMode("update")
        .option("checkpointLocation", output + "/checkpoint")
        .foreachBatch((VoidFunction2<Dataset<Row>, Long>) (batch, id) ->
            batch.write().mode("overwrite").json(output + "/batches/" + id))
        .trigger(Trigger.ProcessingTime("200 milliseconds"))
        .start();
    while (!stop.exists()) {
      query.awaitTermination(200);
    }
    query.stop();
    spark.stop();
  }
}
