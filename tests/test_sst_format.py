"""The state nodes' databases open in every supported Spark line's RocksDB: their SST files use block-based table
format 5, the newest that Spark 3.5's rocksdbjni (8.3.2) reads; with RocksDB's default of 6 a replica materialized
into a 3.5 provider failed to open ("Corrupt or unsupported format_version: 6") and the load fell back to the
checkpoint location. `bin/dev matrix` fails over from replicas on each line's own RocksDB; this checks the setting
on the default line, from the OPTIONS file RocksDB writes beside the data."""

from __future__ import annotations

import re
from pathlib import Path

from rocksdict import Rdict

from statestore.options import SST_FORMAT_VERSION, StoreOptions


def test_node_databases_write_a_table_format_every_line_reads(tmp_path: Path) -> None:
    options = StoreOptions()
    db = Rdict(str(tmp_path / "db"), options.rocksdb_options(create=True))
    for i in range(1000):
        db[f"key{i:05d}".encode()] = b"value" * 10
    db.flush()
    db.close()
    assert list((tmp_path / "db").glob("*.sst")), "no SST file written"
    written = sorted((tmp_path / "db").glob("OPTIONS-*"))[-1].read_text()
    versions = re.findall(r"^\s*format_version=(\d+)", written, re.MULTILINE)
    assert versions and {int(v) for v in versions} == {SST_FORMAT_VERSION} == {5}, versions
