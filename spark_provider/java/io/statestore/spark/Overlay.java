package io.statestore.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.rocksdb.RocksDBException;

/**
 * The writes a batch makes while the last increment of its version is still pending (DESIGN.md section 4,
 * partial-state merge): every write in order, and per key what the writes alone say of its value.
 *
 * <p>Merge policy, as {@link LocalStore} has it: a put or a delete replaces the key's value; a merge operand is
 * appended (byte concatenation) after the value the key has, so after the increment's own operands. A key the
 * batch put or deleted is known here; a key it only merged into still needs its value at the increment's
 * version. {@link #replayOnto} hands the writes to the store in the order the batch made them, once the
 * increment is applied: the store then records them in the batch's change set exactly as if they had been made
 * directly, so the commit's increment is the same bytes as without the overlay.
 */
final class Overlay {
  private record Write(byte op, String cf, byte[] key, byte[] value) {}

  /** What the batch's writes say of one key: {@code known}: its value now ({@code value}, null: deleted); else
   * {@code value} holds the operands to append after its value at the increment's version. */
  static final class View {
    final boolean known;
    final byte[] value;

    private View(boolean known, byte[] value) {
      this.known = known;
      this.value = value;
    }
  }

  private final List<Write> writes = new ArrayList<>();
  private final Map<String, HashMap<ChangeSet.Key, View>> views = new HashMap<>();

  private HashMap<ChangeSet.Key, View> cf(String cf) {
    return views.computeIfAbsent(cf, n -> new HashMap<>());
  }

  void put(String cf, byte[] key, byte[] value) {
    writes.add(new Write(Increment.PUT, cf, key, value));
    cf(cf).put(new ChangeSet.Key(key), new View(true, value));
  }

  void delete(String cf, byte[] key) {
    writes.add(new Write(Increment.DELETE, cf, key, null));
    cf(cf).put(new ChangeSet.Key(key), new View(true, null));
  }

  void merge(String cf, byte[] key, byte[] operand) {
    writes.add(new Write(Increment.MERGE, cf, key, operand));
    ChangeSet.Key k = new ChangeSet.Key(key);
    View before = cf(cf).get(k);
    // Known: the value after the merge; not known: the operands so far, this one last.
    cf(cf).put(k, before == null ? new View(false, operand) : new View(before.known, ChangeSet.concat(before.value,
        operand)));
  }

  /** What the batch's writes say of {@code key}; null when it wrote nothing to it. */
  View view(String cf, byte[] key) {
    HashMap<ChangeSet.Key, View> m = views.get(cf);
    return m == null ? null : m.get(new ChangeSet.Key(key));
  }

  int size() {
    return writes.size();
  }

  /** Makes the batch's writes on {@code store} (at the increment's version), in order; returns how many. */
  int replayOnto(LocalStore store) throws RocksDBException {
    for (Write w : writes) {
      switch (w.op) {
        case Increment.PUT -> store.put(w.cf, w.key, w.value, KeyPresence.UNKNOWN);
        case Increment.DELETE -> store.delete(w.cf, w.key);
        default -> store.merge(w.cf, w.key, w.value);
      }
    }
    int n = writes.size();
    writes.clear();
    views.clear();
    return n;
  }
}
