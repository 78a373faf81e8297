package io.statestore.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

/** MANIFEST.json of a snapshot (formats.md section 4). */
final class SnapshotManifest {
  private static final ObjectMapper JSON = new ObjectMapper();

  /** One file of the RocksDB checkpoint. */
  record FileEntry(String name, long size, long crc32) {}

  final String storeId;
  final long version;
  final List<FileEntry> files;
  /** The lineage of {@code version} (formats.md 3.4); null: not known, or a manifest written before it was kept. */
  final byte[] lineage;

  SnapshotManifest(String storeId, long version, List<FileEntry> files, byte[] lineage) {
    this.storeId = storeId;
    this.version = version;
    this.files = files;
    this.lineage = lineage;
  }

  byte[] toJson() throws IOException {
    ObjectNode root = JSON.createObjectNode();
    root.put("format", "statestore-snapshot");
    root.put("format_version", 1);
    root.put("store_id", storeId);
    root.put("version", version);
    if (lineage != null) root.put("lineage", java.util.HexFormat.of().formatHex(lineage));
    ArrayNode arr = root.putArray("files");
    for (FileEntry f : files) {
      arr.addObject().put("name", f.name()).put("size", f.size()).put("crc32", f.crc32());
    }
    return JSON.writerWithDefaultPrettyPrinter().writeValueAsBytes(root);
  }

  static SnapshotManifest parse(byte[] json, String file) throws IOException {
    JsonNode root;
    try {
      root = JSON.readTree(json);
    } catch (IOException e) {
      throw new IOException("Corrupt snapshot manifest " + file + ": " + e.getMessage(), e);
    }
    if (root == null || !"statestore-snapshot".equals(root.path("format").asText())) {
      throw new IOException("Corrupt snapshot manifest " + file + ": not a statestore snapshot manifest");
    }
    if (root.path("format_version").asInt() != 1) {
      throw new IOException("Snapshot manifest " + file + ": unknown format_version " + root.path("format_version"));
    }
    List<FileEntry> files = new ArrayList<>();
    for (JsonNode f : root.path("files")) {
      files.add(new FileEntry(f.path("name").asText(), f.path("size").asLong(), f.path("crc32").asLong()));
    }
    byte[] lineage = null;
    if (root.hasNonNull("lineage")) {
      String hex = root.get("lineage").asText();
      try {
        lineage = java.util.HexFormat.of().parseHex(hex);
      } catch (IllegalArgumentException e) {
        lineage = new byte[0];
      }
      if (lineage.length != IncrementLayout.LINEAGE_BYTES) {
        throw new IOException("Corrupt snapshot manifest " + file + ": lineage '" + hex + "' is not "
            + 2 * IncrementLayout.LINEAGE_BYTES + " hex digits");
      }
    }
    return new SnapshotManifest(root.path("store_id").asText(), root.path("version").asLong(), files, lineage);
  }
}
