package io.statestore.spark;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.UUID;
import java.util.stream.Stream;

/**
 * Local directories of this JVM's stores and of its state node sidecar's data ({@code node-<executorId>}):
 * {@code <localDir>/<pid>-<uuid>/...}. Spark does not always call close(), and the sidecar keeps its data
 * until its JVM is gone, so the first use in a JVM deletes the directories of JVMs that are gone.
 */
final class LocalDirs {
  private static final java.util.Map<String, File> JVM_DIRS = new java.util.HashMap<>();

  private LocalDirs() {}

  /** This JVM's directory under {@code localRoot}; the first call for a root cleans that root. */
  static synchronized File jvmDir(String localRoot) throws IOException {
    File dir = JVM_DIRS.get(localRoot);
    if (dir == null) {
      File root = new File(localRoot);
      root.mkdirs();
      cleanStale(root);
      dir = new File(root, ProcessHandle.current().pid() + "-" + UUID.randomUUID());
      if (!dir.mkdirs()) throw new IOException("Cannot create local directory " + dir);
      dir.deleteOnExit();
      JVM_DIRS.put(localRoot, dir);
    }
    return dir;
  }

  /** Deletes the directories left by JVMs whose process no longer runs. */
  static void cleanStale(File root) {
    File[] children = root.listFiles();
    if (children == null) return;
    for (File child : children) {
      String name = child.getName();
      int dash = name.indexOf('-');
      if (dash <= 0) continue;
      long pid;
      try {
        pid = Long.parseLong(name.substring(0, dash));
      } catch (NumberFormatException e) {
        continue;
      }
      if (pid == ProcessHandle.current().pid()) continue;
      if (ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false)) continue;
      deleteRecursively(child);
    }
  }

  /**
   * Deletes {@code f} and everything beneath it, best effort (a later start-up retries). An entry may vanish while
   * the tree is walked (RocksDB removing an old OPTIONS file as a store closes): the walk then starts again.
   */
  static void deleteRecursively(File f) {
    for (int attempt = 0; attempt < 3 && f.exists(); attempt++) {
      try (Stream<Path> s = Files.walk(f.toPath())) {
        s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
      } catch (IOException | java.io.UncheckedIOException e) {
        // walk again
      }
    }
  }
}
