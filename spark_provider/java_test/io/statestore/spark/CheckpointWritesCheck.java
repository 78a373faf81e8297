package io.statestore.spark;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermissions;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Writes to a checkpoint directory through the provider's {@link CheckpointDir} (the first argument; the second,
 * {@code custom}, names a {@code file:} file system of the user's instead of Hadoop's), for
 * tests/test_checkpoint_writes.py: increment 1 twice (a re-run batch rewrites it), then snapshot 1 from a local
 * directory of two files. Prints the file system's class, then each entry below the directory with its
 * permissions and size, one per line, then the increment read back.
 */
public final class CheckpointWritesCheck {
  /** A {@code file:} file system of a user's: its writes must go through it. */
  public static final class UsersLocalFileSystem extends LocalFileSystem {}

  public static void main(String[] args) throws Exception {
    File dir = new File(args[0], "state/0/3");
    Configuration conf = new Configuration();
    if (args.length > 1 && args[1].equals("custom")) {
      conf.set("fs.file.impl", UsersLocalFileSystem.class.getName());
      conf.setBoolean("fs.file.impl.disable.cache", true);
    }
    CheckpointDir checkpoint = new CheckpointDir(new Path(dir.toURI()), conf);
    System.out.println("file system " + new Path(dir.toURI()).getFileSystem(conf).getClass().getName());
    checkpoint.writeIncrement(1, IncrementCodec.encode(increment(1, "first"), 1));
    checkpoint.writeIncrement(1, IncrementCodec.encode(increment(1, "rewritten"), 1));
    File local = Files.createTempDirectory("snapshot-source").toFile();
    Files.write(new File(local, "000009.sst").toPath(), new byte[] {1, 2, 3});
    Files.write(new File(local, "CURRENT").toPath(), "MANIFEST-000005\n".getBytes());
    checkpoint.uploadSnapshot(1, "q/0/3/default", local, null);
    try (var paths = Files.walk(new File(args[0]).toPath())) {
      for (java.nio.file.Path p : (Iterable<java.nio.file.Path>) paths.sorted()::iterator) {
        String mode = PosixFilePermissions.toString(Files.getPosixFilePermissions(p));
        System.out.println("entry " + new File(args[0]).toPath().relativize(p) + " " + mode + " "
            + (Files.isDirectory(p) ? "dir" : Files.size(p)));
      }
    }
    Increment back = checkpoint.readIncrement(1);
    System.out.println("read " + new String(back.values[0], java.nio.charset.StandardCharsets.UTF_8));
    System.out.println("listing " + checkpoint.list());
  }

  private static Increment increment(long version, String value) {
    Increment inc = new Increment("q/0/3/default", version, version - 1);
    inc.add(Increment.PUT, inc.addCf("default", true, 1), "k".getBytes(), value.getBytes());
    return inc;
  }
}
