"""The increment file format: round trips, and a clear error for every kind of damage."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statestore.errors import CorruptFileError, UnsupportedFormatError
from statestore.increment import (
    EMPTY_LINEAGE,
    END_MAGIC,
    LINEAGE_BYTES,
    ColumnFamilyState,
    Increment,
    Op,
    decode_increment,
    encode_increment,
    read_increment,
    read_increment_header,
    verify_increment,
)


def sample_increment() -> Increment:
    return Increment(
        store_id="0/1/default",
        version=5,
        base_version=4,
        column_families=[ColumnFamilyState("default", True, 3), ColumnFamilyState("gone", False, 0)],
        ops=bytes([Op.DROP_COLUMN_FAMILY, Op.PUT, Op.DELETE, Op.MERGE, Op.PUT]),
        cf_indexes=[1, 0, 0, 0, 0],
        keys=[b"", b"a", b"b", b"c", b"empty-value"],
        values=[b"", b"1", b"", b"\x00\x00\x00\x01x", b""],
    )


def fields(increment: Increment) -> tuple:
    return (
        increment.store_id,
        increment.version,
        increment.base_version,
        increment.column_families,
        increment.ops,
        increment.cf_indexes,
        increment.keys,
        increment.values,
    )


@pytest.mark.parametrize("compress", [False, True])
def test_round_trip_keeps_every_field(compress: bool) -> None:
    original = sample_increment()
    assert fields(decode_increment(encode_increment(original, compress=compress))) == fields(original)


def test_records_name_their_column_family() -> None:
    records = list(sample_increment().records())
    assert records[0] == (Op.DROP_COLUMN_FAMILY, "gone", b"", b"")
    assert records[3] == (Op.MERGE, "default", b"c", b"\x00\x00\x00\x01x")


def test_empty_increment_round_trips() -> None:
    empty = Increment("s", 1, 0, [], b"", [], [], [])
    decoded = decode_increment(encode_increment(empty))
    assert decoded.record_count == 0 and decoded.version == 1


@settings(max_examples=60, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.binary(max_size=40), st.binary(max_size=200)), max_size=50),
    compress=st.booleans(),
)
def test_random_records_round_trip(pairs: list[tuple[bytes, bytes]], compress: bool) -> None:
    increment = Increment(
        "s",
        9,
        8,
        [ColumnFamilyState("default", True, len(pairs))],
        bytes([Op.PUT]) * len(pairs),
        [0] * len(pairs),
        [k for k, _ in pairs],
        [v for _, v in pairs],
    )
    assert fields(decode_increment(encode_increment(increment, compress=compress))) == fields(increment)


# A primary's node only verifies the envelope of what it ships (verify_increment); a replica decodes it.
READERS = pytest.mark.parametrize("read", [decode_increment, verify_increment], ids=["decode", "verify"])


@READERS
def test_every_truncation_is_refused_naming_the_file(read: Callable[[bytes, str], Increment]) -> None:
    data = encode_increment(sample_increment())
    for length in range(len(data)):
        with pytest.raises(CorruptFileError) as error:
            read(data[:length], "ckpt/5.increment")
        assert error.value.path == "ckpt/5.increment"


@READERS
def test_every_flipped_byte_is_refused(read: Callable[[bytes, str], Increment]) -> None:
    data = encode_increment(sample_increment(), compress=True)
    for position in range(len(data)):
        damaged = bytearray(data)
        damaged[position] ^= 0x40
        with pytest.raises(CorruptFileError):
            read(bytes(damaged), "x.increment")


@pytest.mark.parametrize("compress", [False, True])
def test_verifying_gives_the_identity_without_decoding_the_records(compress: bool) -> None:
    original = sample_increment()
    original.parent_lineage = EMPTY_LINEAGE
    verified = verify_increment(encode_increment(original, compress=compress))
    assert (verified.store_id, verified.version, verified.base_version, verified.column_families) == (
        original.store_id,
        original.version,
        original.base_version,
        original.column_families,
    )
    assert (verified.parent_lineage, verified.lineage) == (EMPTY_LINEAGE, original.lineage)
    assert verified.record_count == 0 and verified.keys == []


def test_checksum_mismatch_is_named() -> None:
    data = bytearray(encode_increment(sample_increment()))
    data[-20] ^= 1  # inside the body
    with pytest.raises(CorruptFileError, match="checksum mismatch"):
        decode_increment(bytes(data))


def test_trailing_bytes_are_refused() -> None:
    with pytest.raises(CorruptFileError, match="unexpected bytes after the trailer"):
        decode_increment(encode_increment(sample_increment()) + b"junk")


def test_other_files_are_not_taken_for_increments() -> None:
    with pytest.raises(CorruptFileError, match="not an increment file"):
        decode_increment(b"PK\x03\x04" + bytes(100), "something.zip")


def _with_header_field(data: bytes, offset: int, packed: bytes) -> bytes:
    """Replace header bytes and re-seal the checksum, as a writer of another format version would."""
    body = bytearray(data[:-8])
    body[offset : offset + len(packed)] = packed
    return bytes(body) + struct.pack(">I", zlib.crc32(body)) + END_MAGIC


def test_unknown_format_version_is_refused() -> None:
    data = _with_header_field(encode_increment(sample_increment()), 4, struct.pack(">H", 3))
    with pytest.raises(UnsupportedFormatError, match="unknown increment format version 3"):
        decode_increment(data)


def _lineage_offset(increment: Increment) -> int:
    return 8 + 2 + len(increment.store_id.encode()) + 16 + LINEAGE_BYTES


def as_format_1(data: bytes, increment: Increment) -> bytes:
    """The same increment as a format 1 writer laid it out: no lineage fields."""
    start = _lineage_offset(increment) - LINEAGE_BYTES
    body = bytearray(data[:start] + data[start + 2 * LINEAGE_BYTES : -8])
    body[4:6] = struct.pack(">H", 1)
    return bytes(body) + struct.pack(">I", zlib.crc32(body)) + END_MAGIC


def test_format_1_files_still_read_without_a_lineage() -> None:
    original = sample_increment()
    decoded = decode_increment(as_format_1(encode_increment(original), original))
    assert fields(decoded) == fields(original)
    assert decoded.lineage is None and decoded.parent_lineage is None
    assert read_increment_header(as_format_1(encode_increment(original), original)).lineage is None


def test_the_lineage_follows_the_parent_and_the_content() -> None:
    first, second, third = sample_increment(), sample_increment(), sample_increment()
    first.parent_lineage = second.parent_lineage = EMPTY_LINEAGE
    third.parent_lineage = b"\x01" * LINEAGE_BYTES
    a, b, c = encode_increment(first), encode_increment(second), encode_increment(third)
    assert a == b and first.lineage == second.lineage
    assert first.lineage != third.lineage
    assert decode_increment(c).parent_lineage == b"\x01" * LINEAGE_BYTES
    other = sample_increment()
    other.parent_lineage = EMPTY_LINEAGE
    other.values[1] = b"2"
    encode_increment(other)
    assert other.lineage != first.lineage
    header = read_increment_header(a[: 58 + len("0/1/default")])
    assert (header.store_id, header.version, header.parent_lineage, header.lineage) == (
        "0/1/default", 5, EMPTY_LINEAGE, first.lineage
    )


def test_an_unknown_parent_reads_back_as_none() -> None:
    increment = sample_increment()
    decoded = decode_increment(encode_increment(increment))
    assert decoded.parent_lineage is None and decoded.lineage == increment.lineage is not None


def test_a_lineage_that_does_not_match_the_bytes_is_refused() -> None:
    increment = sample_increment()
    data = encode_increment(increment)
    forged = _with_header_field(data, _lineage_offset(increment), b"\x07" * LINEAGE_BYTES)
    with pytest.raises(CorruptFileError, match="lineage does not match"):
        decode_increment(forged)


def test_unknown_flags_are_refused() -> None:
    data = _with_header_field(encode_increment(sample_increment()), 6, struct.pack(">H", 0x8000))
    with pytest.raises(UnsupportedFormatError, match="unknown increment flags"):
        decode_increment(data)


def test_read_increment_names_the_path(tmp_path) -> None:
    path = tmp_path / "5.increment"
    path.write_bytes(encode_increment(sample_increment())[:-3])
    with pytest.raises(CorruptFileError, match=str(path)):
        read_increment(path)


@pytest.mark.parametrize(("key_width", "value_width", "odd_one"), [(16, 24, False), (16, 0, False), (8, 8, True)])
def test_many_records_of_one_width_round_trip_as_bytes(key_width: int, value_width: int, odd_one: bool) -> None:
    """Records of one key width and one value width are sliced in bulk (numpy): still bytes, still in order."""
    n = 700
    keys = [i.to_bytes(key_width, "big") for i in range(n)]
    values = [(i * 7).to_bytes(value_width, "little") if value_width else b"" for i in range(n)]
    if odd_one:
        values[n // 2] = b"longer than the others"
    original = Increment(
        "0/0/default", 3, 2, [ColumnFamilyState("default", True, n)], bytes([Op.PUT]) * n, [0] * n, keys, values
    )
    decoded = decode_increment(encode_increment(original, compress=True))
    assert (decoded.keys, decoded.values) == (keys, values)
    assert {type(k) for k in decoded.keys} | {type(v) for v in decoded.values} == {bytes}
