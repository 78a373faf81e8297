package io.statestore.spark;

import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.hadoop.fs.Path;

/**
 * A state file of Spark's own RocksDB provider, recognised by its path alone (DESIGN.md section 8: the file system
 * layers carry no Spark context, and format 2's checksum threads carry no TaskContext):
 * {@code <checkpoint>/state/<operator>/<partition>[/<store name>]/<file>} where the file is an SST
 * ({@code SSTs/<name>.sst}), a snapshot ({@code <version>[_<id>].zip}) or a changelog
 * ({@code <version>[_<id>].changelog}). Every other path (offsets, commits, sources, metadata, checksum sidecars)
 * is not one.
 */
record StateFilePath(Kind kind, String checkpointRoot, int operator, int partition, String storeName, String name) {
  enum Kind { SST, SNAPSHOT, CHANGELOG }

  private static final Pattern STATE_FILE = Pattern.compile(
      "^(.*)/state/(\\d+)/(\\d+)(?:/([^/]+))?/(SSTs/[^/]+\\.sst|\\d+(?:_[0-9a-fA-F-]+)?\\.(zip|changelog))$");

  // Spark's checkpoint file managers write a file atomically through `.<name>.<uuid>[.TID<task>].tmp` beside it.
  private static final Pattern TEMPORARY = Pattern.compile(
      "^\\.(.+)\\.[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(?:\\.TID\\d+)?\\.tmp$");

  /** The path a temporary file of Spark's checkpoint file managers becomes by its rename, or null when {@code path}
   * is not named as one. */
  static Path finalOfTemporary(Path path) {
    Matcher m = TEMPORARY.matcher(path.getName());
    return m.matches() && path.getParent() != null ? new Path(path.getParent(), m.group(1)) : null;
  }

  /** The state file at {@code path}, or null when it is not one (or when an outer layer already handles it:
   * {@link ReplicaFiles#beneath}). */
  static StateFilePath of(Path path) {
    if (ReplicaFiles.isBeneathALayer()) return null;
    Matcher m = STATE_FILE.matcher(path.toUri().getPath());
    if (!m.matches()) return null;
    String store = m.group(4) == null ? "default" : m.group(4);
    if (store.equals("SSTs")) return null; // SSTs/<name>.sst directly under a partition matches the store group
    Kind kind = m.group(6) == null ? Kind.SST : m.group(6).equals("zip") ? Kind.SNAPSHOT : Kind.CHANGELOG;
    return new StateFilePath(kind, m.group(1), Integer.parseInt(m.group(2)), Integer.parseInt(m.group(3)), store,
        m.group(5));
  }

  /** The state version the file belongs to: a snapshot's or a changelog's; 0 for an SST. */
  long version() {
    if (kind == Kind.SST) return 0;
    int end = 0;
    while (end < name.length() && Character.isDigit(name.charAt(end))) end++;
    return Long.parseLong(name.substring(0, end));
  }

  /** The path part of the directory Spark keeps the store partition's files in (a store other than the default one
   * has its own directory under the partition's). */
  String partitionDir() {
    return checkpointRoot + "/state/" + operator + "/" + partition + ("default".equals(storeName) ? "" : "/" + storeName);
  }

  /** The partition's store, as our logs name stores: operator/partition/store name. */
  String storeId() {
    return operator + "/" + partition + "/" + storeName;
  }
}
