package io.statestore.spark;

/**
 * Reaches the provider's fault point {@code <point>} of partition {@code <partition>} once, as a task would, and
 * prints {@code passed} or {@code raised: <message>}. Usage: {@code FaultsCheck <faults file> <point> <partition>}
 * (tests/test_fault_points.py).
 */
public final class FaultsCheck {
  private FaultsCheck() {}

  public static void main(String[] args) {
    String storeId = "0/" + args[2] + "/default";
    try {
      Faults.at(args[0], args[1], Integer.parseInt(args[2]), storeId);
      System.out.println("passed");
    } catch (IllegalStateException e) {
      System.out.println("raised: " + e.getMessage());
    }
  }
}
