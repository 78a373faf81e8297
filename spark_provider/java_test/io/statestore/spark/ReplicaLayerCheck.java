package io.statestore.spark;

import java.io.File;
import java.net.URI;
import java.nio.file.Files;
import java.util.Arrays;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.Path;

/**
 * The replica file layer for checkpoint locations of other schemes ({@link ReplicaFilterFileSystem}) over Hadoop's
 * raw local file system, without Spark, for tests/test_replica_layer.py.
 *
 * <p>Usage: {@code ReplicaLayerCheck <mode> <checkpoint dir> <copies dir>}, modes:
 * <ul>
 *   <li>{@code copy-fallback}: an SST written without the layer (no copy kept) is copied to local disk with
 *       {@code copyToLocalFile}, as Spark's file manager does on a load: the bytes copied, and the bytes the layer
 *       counted as read from the checkpoint location;</li>
 *   <li>{@code abort}: a changelog's temporary file written through the layer is aborted, as Spark's checkpoint file
 *       manager for object stores cancels a write: the staging files left in the copies directory.</li>
 * </ul>
 * Prints {@code name=value} lines.
 */
public final class ReplicaLayerCheck {
  private ReplicaLayerCheck() {}

  public static void main(String[] args) throws Exception {
    String mode = args[0];
    File checkpoint = new File(args[1]);
    File copies = new File(args[2]);
    Configuration conf = new Configuration(false);
    conf.set(String.format(ReplicaFilterFileSystem.WRAPPED_KEY, "file"), "org.apache.hadoop.fs.RawLocalFileSystem");
    conf.set(ReplicaFiles.DIR_KEY, copies.getAbsolutePath());
    ReplicaFilterFileSystem fs = new ReplicaFilterFileSystem();
    fs.initialize(URI.create("file:///"), conf);
    File partition = new File(checkpoint, "state/0/0");
    if (mode.equals("copy-fallback")) {
      File sst = new File(partition, "SSTs/000012-4f1c2d3e-0000-0000-0000-000000000001.sst");
      sst.getParentFile().mkdirs();
      byte[] bytes = new byte[200_000];
      Arrays.fill(bytes, (byte) 7);
      Files.write(sst.toPath(), bytes);
      File target = new File(checkpoint.getParentFile(), "rocksdb-working/000012.sst");
      target.getParentFile().mkdirs();
      long before = CheckpointReads.bytes(StateFilePath.Kind.SST);
      fs.copyToLocalFile(false, new Path(sst.toURI()), new Path(target.toURI()), true);
      System.out.println("copied_equal=" + Arrays.equals(Files.readAllBytes(target.toPath()), bytes));
      System.out.println("size=" + bytes.length);
      System.out.println("counted=" + (CheckpointReads.bytes(StateFilePath.Kind.SST) - before));
    } else if (mode.equals("abort")) {
      partition.mkdirs();
      Path temporary = new Path(new File(partition, ".1.changelog.0b4d6e2a-1c3f-4a5b-8c7d-9e0f1a2b3c4d.tmp").toURI());
      FSDataOutputStream out = fs.create(temporary);
      out.write(new byte[4096]);
      String outcome;
      try {
        out.abort();
        outcome = "aborted";
      } catch (UnsupportedOperationException e) {
        outcome = "unsupported";
      }
      System.out.println("abort=" + outcome);
      long staging;
      try (var files = Files.walk(copies.toPath())) {
        staging = files.filter(p -> p.getFileName().toString().endsWith(".tmp")).count();
      }
      System.out.println("staging=" + staging);
    } else {
      throw new IllegalArgumentException("unknown mode: " + mode);
    }
  }
}
