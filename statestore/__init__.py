"""A replicated, incrementally-checkpointed RocksDB state store for Spark Structured Streaming.

The engine: a versioned RocksDB store per state partition whose every commit yields an increment
(docs/formats.md), snapshots, and a checkpoint location that restores any retained version.
"""
