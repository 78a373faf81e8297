"""docs/formats.md's example increment is exactly what the codec writes and reads."""

from __future__ import annotations

import re
from pathlib import Path

from statestore.increment import (
    EMPTY_LINEAGE,
    ColumnFamilyState,
    Increment,
    Op,
    decode_increment,
    encode_increment,
)

FORMATS = Path(__file__).resolve().parent.parent / "docs" / "formats.md"


def documented_example() -> bytes:
    match = re.search(r"```hex\n(.*?)```", FORMATS.read_text(), re.S)
    assert match, "docs/formats.md has no ```hex example"
    return bytes.fromhex("".join(match.group(1).split()))


def test_the_documented_example_is_what_we_write() -> None:
    example = Increment(
        "0/0/default",
        1,
        0,
        [ColumnFamilyState("default", True, 2)],
        bytes([Op.PUT, Op.DELETE]),
        [0, 0],
        [b"k", b"gone"],
        [b"v", b""],
        parent_lineage=EMPTY_LINEAGE,
    )
    assert encode_increment(example) == documented_example()
    assert example.lineage.hex() in FORMATS.read_text()


def test_the_documented_example_reads_back() -> None:
    decoded = decode_increment(documented_example(), "docs/formats.md example")
    assert list(decoded.records()) == [(Op.PUT, "default", b"k", b"v"), (Op.DELETE, "default", b"gone", b"")]
    assert decoded.column_families == [ColumnFamilyState("default", True, 2)]
    assert decoded.parent_lineage == EMPTY_LINEAGE
