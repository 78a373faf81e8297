package io.statestore.spark;

import java.io.File;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

/**
 * Runs the provider's retention ({@link CheckpointDir#retain}) on the checkpoint directory given as the first
 * argument, for store id the second, keeping the number of versions the third, and prints the directory's
 * entries left, one per line, for tests/test_checkpoint_location.py (whose Python engine wrote the directory: the
 * two languages share its format).
 */
public final class RetentionCheck {
  public static void main(String[] args) throws Exception {
    File dir = new File(args[0]);
    new CheckpointDir(new Path(dir.toURI()), new Configuration()).retain(Integer.parseInt(args[2]), args[1]);
    String[] left = dir.list();
    java.util.Arrays.sort(left);
    for (String name : left) System.out.println(name);
  }
}
