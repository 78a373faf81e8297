package io.statestore.spark;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Named fault points of the provider, for tests that must kill an executor at an exact protocol step (a real
 * SIGKILL of this JVM). Off unless the {@code faultsFile} setting names a file; then, at each point, the file is
 * looked for (one {@code stat}); when it exists and names this point (and partition), the first provider to claim
 * it (by deleting it: one shot) acts. The file holds one line: {@code <point> kill [<partition id>]}.
 *
 * <p>Points: {@code load} (a writable load is done, before the batch's writes), {@code commit} (the batch wrote
 * everything, nothing of its commit is done yet), {@code committed} (the increment is durable and queued for the
 * node, maybe not sent yet; Spark has not heard of the commit).
 */
final class Faults {
  private static final Logger LOG = LoggerFactory.getLogger(Faults.class);

  private Faults() {}

  /** Acts if the faults file is armed for {@code point} (and {@code partitionId}). */
  static void at(String faultsFile, String point, int partitionId, String storeId) {
    if (faultsFile == null) return;
    File file = new File(faultsFile);
    if (!file.exists()) return;
    String[] words;
    try {
      words = new String(Files.readAllBytes(file.toPath()), StandardCharsets.UTF_8).trim().split("\\s+");
    } catch (IOException e) {
      return; // claimed by another task meanwhile
    }
    if (words.length < 2 || !words[0].equals(point)) return;
    if (words.length > 2 && !words[2].equals(Integer.toString(partitionId))) return;
    try {
      Files.delete(file.toPath());
    } catch (NoSuchFileException e) {
      return; // another task claimed it first
    } catch (IOException e) {
      return;
    }
    if ("kill".equals(words[1])) {
      LOG.warn("statestore fault point {} of {}: kill -9 of this executor JVM", point, storeId);
      try {
        new ProcessBuilder("kill", "-9", Long.toString(ProcessHandle.current().pid())).inheritIO().start().waitFor();
        Thread.sleep(60_000); // the signal arrives meanwhile
      } catch (IOException | InterruptedException e) {
        Runtime.getRuntime().halt(137);
      }
    }
  }
}
