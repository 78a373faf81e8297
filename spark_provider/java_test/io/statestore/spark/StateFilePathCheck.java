package io.statestore.spark;

import org.apache.hadoop.fs.Path;

/** Prints how StateFilePath classifies each path given (tests/test_replica_fs.py): kind, store id, name, or none. */
public final class StateFilePathCheck {
  public static void main(String[] args) {
    for (String arg : args) {
      StateFilePath f = StateFilePath.of(new Path(arg));
      System.out.println(f == null ? "none" : f.kind() + " " + f.checkpointRoot() + " " + f.storeId() + " " + f.name());
    }
  }
}
