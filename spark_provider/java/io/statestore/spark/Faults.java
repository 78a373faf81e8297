package io.statestore.spark;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Named fault points of the provider, for tests that must kill an executor at an exact protocol step (a real
 * SIGKILL of this JVM). Off unless the {@code faultsFile} setting names a file; then, at each point, the file is
 * looked for (one {@code stat}); when a line of it names this point (and partition), the first provider to claim
 * that line (by deleting the file, or taking it and putting the other lines back: one shot) acts. A line is
 * {@code <point> kill [<partition id>]} (SIGKILL of this JVM) or {@code <point> delay <millis> [<partition id>]}
 * (the thread reaching the point sleeps that long). Tests arm one line, or several for different points of one
 * task (while a line is being claimed, the file is briefly absent to other tasks). {@code <point> raise
 * [<partition id>]} fails the step with an IllegalStateException (the task fails; Spark retries it), and
 * {@code <point> pause [<partition id>]} stops this JVM with SIGSTOP until a SIGCONT (a long GC pause). The state
 * nodes and the controller have points of their own in the same format ({@code statestore.faults.points}).
 *
 * <p>Points: {@code load} (a writable load is done, before the batch's writes), {@code commit} (the batch wrote
 * everything, nothing of its commit is done yet), {@code committed} (the increment is durable and queued for the
 * node, maybe not sent yet; Spark has not heard of the commit), {@code acked} (sync replication only: a replica
 * acked the increment; Spark has not heard of the commit), {@code last-increment} (a load from the state
 * node's copy at {@code v-1} is about to read increment {@code v} from the checkpoint location: with partial
 * merge on the background thread of {@link PendingIncrement}, the task's batch writing meanwhile; without, in the
 * load itself. {@code delay} there stands for an increment still in flight from the previous primary),
 * {@code last-increment-apply} (with partial merge: that increment is read and decoded, about to be applied; a
 * {@code delay} there stands for a large increment's apply, and lets reads of keys it does not touch go on).
 */
final class Faults {
  private static final Logger LOG = LoggerFactory.getLogger(Faults.class);

  private Faults() {}

  /** Acts if the faults file is armed for {@code point} (and {@code partitionId}). */
  static void at(String faultsFile, String point, int partitionId, String storeId) {
    if (faultsFile == null) return;
    File file = new File(faultsFile);
    if (!file.exists()) return;
    List<String> lines;
    try {
      lines = new ArrayList<>(Files.readAllLines(file.toPath(), StandardCharsets.UTF_8));
    } catch (IOException e) {
      return; // claimed by another task meanwhile
    }
    lines.removeIf(String::isBlank);
    int armed = -1;
    for (int i = 0; i < lines.size() && armed < 0; i++) {
      if (names(lines.get(i).trim().split("\\s+"), point, partitionId)) armed = i;
    }
    if (armed < 0) return;
    String[] words = lines.get(armed).trim().split("\\s+");
    boolean delay = "delay".equals(words[1]);
    long millis;
    try {
      millis = delay ? Long.parseLong(words[2]) : 0;
    } catch (NumberFormatException | ArrayIndexOutOfBoundsException e) {
      LOG.warn("statestore fault point {}: bad line in {}: expected '<point> delay <millis> [<partition>]'", point,
          faultsFile);
      return;
    }
    if (!claim(file, lines, armed)) return;
    if (delay) {
      LOG.warn("statestore fault point {} of {}: delay of {} ms", point, storeId, millis);
      try {
        Thread.sleep(millis);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      return;
    }
    if ("raise".equals(words[1])) {
      LOG.warn("statestore fault point {} of {}: injected failure", point, storeId);
      throw new IllegalStateException("statestore fault point " + point + " of " + storeId + ": injected failure");
    }
    if ("pause".equals(words[1])) {
      // SIGSTOP of this JVM: every thread stops until a SIGCONT, as a JVM stuck in a long GC pause or swapped out.
      LOG.warn("statestore fault point {} of {}: SIGSTOP of this executor JVM", point, storeId);
      try {
        new ProcessBuilder("kill", "-STOP", Long.toString(ProcessHandle.current().pid())).inheritIO().start();
        Thread.sleep(1_000); // the signal arrives meanwhile; the sleep goes on after SIGCONT
      } catch (IOException | InterruptedException e) {
        Thread.currentThread().interrupt();
      }
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

  private static boolean names(String[] words, String point, int partitionId) {
    if (words.length < 2 || !words[0].equals(point)) return false;
    int partitionAt = "delay".equals(words[1]) ? 3 : 2;
    return words.length <= partitionAt || words[partitionAt].equals(Integer.toString(partitionId));
  }

  /**
   * Claims line {@code armed} of the faults file: deletes the file when it is the only one, else takes the
   * whole file (a rename: one claimant) and puts the other lines back. False when another task claimed it first.
   */
  private static boolean claim(File file, List<String> lines, int armed) {
    try {
      if (lines.size() == 1) {
        Files.delete(file.toPath());
        return true;
      }
      Path taken = file.toPath().resolveSibling(file.getName() + ".claimed-" + UUID.randomUUID());
      Files.move(file.toPath(), taken, StandardCopyOption.ATOMIC_MOVE);
      lines.remove(armed);
      Path rest = file.toPath().resolveSibling(file.getName() + ".rest-" + UUID.randomUUID());
      Files.write(rest, lines, StandardCharsets.UTF_8);
      Files.move(rest, file.toPath(), StandardCopyOption.ATOMIC_MOVE);
      Files.deleteIfExists(taken);
      return true;
    } catch (NoSuchFileException e) {
      return false; // another task claimed it first
    } catch (IOException e) {
      return false;
    }
  }
}
