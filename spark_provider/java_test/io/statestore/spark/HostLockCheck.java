package io.statestore.spark;

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;

/**
 * Holds the host's copies lock ({@link ReplicaFiles#underHostLock}) of the directory given as the only argument:
 * prints {@code locked} once it holds it and releases it when a line arrives on stdin, then prints
 * {@code released}. For tests/test_host_copies_lock.py, which checks that the state node's Python lock and this
 * one exclude each other.
 */
public final class HostLockCheck {
  public static void main(String[] args) throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
    ReplicaFiles.underHostLock(new File(args[0]), () -> {
      System.out.println("locked");
      System.out.flush();
      in.readLine();
      return null;
    });
    System.out.println("released");
    System.out.flush();
  }
}
