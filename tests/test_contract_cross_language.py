"""Both languages speak the same contract: every local-channel frame the node's Python encodes is decoded by the
provider's Java into the same fields and encoded back to the same bytes, and the increment of docs/formats.md's
example is the same bytes from both codecs (spark_provider/java_test/.../ContractCheck.java is the Java side)."""

from __future__ import annotations

import dataclasses
import subprocess
from typing import Any

import pytest

from statestore.contract import local_channel_frames as frames
from statestore.contract.generate import camel, load_spec
from statestore.errors import CorruptFileError
from statestore.increment import ColumnFamilyState, Increment, Op, decode_increment, encode_increment

CHANNEL = load_spec("local_channel")
INCREMENT = load_spec("increment")


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from conftest import java_check

    command = java_check(tmp_path_factory, "ContractCheck", "128m")

    def ask(lines: list[str]) -> list[str]:
        result = subprocess.run(
            command, input="".join(line + "\n" for line in lines), capture_output=True, text=True, check=True,
            timeout=120,
        )  # fmt: skip
        return result.stdout.splitlines()

    return ask


def _sample(field: dict[str, Any], variant: int) -> Any:
    """A value of the field's type that tells fields apart and exercises the type's edges."""
    kind = field["type"]
    if field.get("one_of"):
        values = sorted(CHANNEL["constants"][field["one_of"]].values())
        return values[(variant + len(field["name"])) % len(values)]
    return {
        "str": f"{field['name']}-é/{variant}",
        "u8": 200 + variant,
        "u16": 65535 - variant,
        "u32": 4_000_000_000 + variant,  # over Java's int
        "u64": 2**62 + len(field["name"]) + variant,
        "lineage": None if variant else bytes(range(16)),
        "bytes": b"\x00\xff" + field["name"].encode(),
    }[kind]


def _message(frame: dict[str, Any], variant: int) -> Any:
    cls = getattr(frames, frame["class"])
    values: dict[str, Any] = {}
    for field in frame["fields"]:
        if field["type"] == "bits":
            for i, bit in enumerate(field["bits"]):
                values[bit["name"]] = (i + variant) % 2 == 0
        elif field["type"] == "list":
            entries = [frames.Incoming(f"0/{i}/default", f"/ckpt/é{i}", i * 2**40) for i in range(variant + 1)]
            values[field["name"]] = entries
        else:
            values[field["name"]] = _sample(field, variant)
    return cls(**values)


def _rendered(message: Any) -> str:
    """The fields as ContractCheck prints them."""
    parts = []
    for f in dataclasses.fields(message):
        value = getattr(message, f.name)
        if value is None:
            text = "null"
        elif isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, bytes):
            text = value.hex()
        elif isinstance(value, str):
            text = f'"{value}"'
        elif isinstance(value, list):
            text = "[" + "; ".join(_rendered(e) for e in value) + "]"
        else:
            text = str(value)
        parts.append(f"{camel(f.name)}={text}")
    return " ".join(parts)


def test_every_frame_means_the_same_in_java_and_encodes_back_to_the_same_bytes(java: Any) -> None:
    cases = []
    for frame in CHANNEL["frame"]:
        for variant in (0, 1):
            message = _message(frame, variant)
            encoded = getattr(frames, f"encode_{frame['type'].lower()}")(message)
            cases.append((frame["type"], message, encoded))
    answers = java([f"frame {encoded.hex()}" for _, _, encoded in cases])
    assert len(answers) == len(cases), answers
    for (kind, message, encoded), answer in zip(cases, answers, strict=True):
        decoded, _, again = answer.partition(" | ")
        assert decoded.rstrip() == f"{kind} {_rendered(message)}".rstrip(), kind
        assert again == encoded.hex(), kind
        decoder = getattr(frames, f"decode_{kind.lower()}")
        assert decoder(encoded[5:]) == message, kind


def test_java_refuses_what_python_refuses_in_a_frame(java: Any) -> None:
    bad_bits = frames.encode_materialize(frames.Materialize("s", "c", 1, "/t", True, 5))
    bad_bits = bad_bits[:-5] + bytes([0x80]) + bad_bits[-4:]
    truncated = frames.encode_load(frames.Load("s", "c", 1, 2, 3, 4, 5))[:-1]
    answers = java([f"frame {bad_bits.hex()}", f"frame {truncated.hex()}"])
    assert [a.startswith("error: bad ") for a in answers] == [True, True], answers
    for data, decode in ((bad_bits, frames.decode_materialize), (truncated, frames.decode_load)):
        with pytest.raises(frames.FrameError):
            decode(data[5:])


def _example_increment() -> Increment:
    example = INCREMENT["example"]
    cfs = [ColumnFamilyState(c["name"], c["exists"], c["key_count"]) for c in example["column_families"]]
    records = example["records"]
    return Increment(
        example["store_id"], example["version"], example["base_version"], cfs,
        ops=bytes(Op[r["op"]] for r in records), cf_indexes=[r["cf"] for r in records],
        keys=[r["key"].encode() for r in records], values=[r["value"].encode() for r in records],
        parent_lineage=bytes(16),
    )  # fmt: skip


def test_the_documented_increment_is_the_same_bytes_from_both_codecs(java: Any) -> None:
    example = INCREMENT["example"]
    expected = "".join(example["hex"].split())
    python = encode_increment(_example_increment())
    assert python.hex() == expected
    cf, records = example["column_families"][0], example["records"]
    words = " ".join(f"{r['op']} {r['key'].encode().hex() or '-'} {r['value'].encode().hex() or '-'}" for r in records)
    line = (f"increment {example['store_id']} {example['version']} {example['base_version']} {cf['name']} "
            f"{str(cf['exists']).lower()} {cf['key_count']} {words}")  # fmt: skip
    decoded_line = f"decode-increment {python.hex()}"
    java_bytes, java_decoded = java([line, decoded_line])
    assert java_bytes == expected
    assert java_decoded.split(" ")[:4] == [example["store_id"], "1", "0", example["lineage"]]
    python_decoded = decode_increment(bytes.fromhex(expected))
    assert python_decoded.lineage.hex() == example["lineage"]
    ops = [f"{int(Op[r['op']])}:{r['cf']}:{r['key'].encode().hex()}:{r['value'].encode().hex()}" for r in records]
    assert java_decoded.split(" ")[5:] == ops


def _resealed(data: bytes) -> bytes:
    """Increment bytes whose header was edited, with their lineage and checksum made right again: damage that
    only the column-family table's own checks can catch."""
    import struct
    import zlib

    from statestore.increment import LINEAGE_BYTES, _lineage_hash

    store_id_len = struct.unpack_from(">H", data, 8)[0]
    lineage_at = 8 + 2 + store_id_len + 16 + LINEAGE_BYTES
    end = len(data) - 8
    lineage = _lineage_hash(data[:lineage_at], data[lineage_at + LINEAGE_BYTES : end])
    body = data[:lineage_at] + lineage + data[lineage_at + LINEAGE_BYTES : end]
    return body + struct.pack(">I", zlib.crc32(body)) + data[-4:]


def _with_column_families(*cfs: ColumnFamilyState) -> bytes:
    return encode_increment(
        Increment("0/0/default", 1, 0, list(cfs), ops=bytes([Op.PUT]), cf_indexes=[0], keys=[b"k"], values=[b"v"],
                  parent_lineage=bytes(16))
    )  # fmt: skip


def test_both_codecs_refuse_a_column_family_table_no_writer_produces(java: Any) -> None:
    """Applied, such a table would overwrite the store's bookkeeping (`__statestore_meta`), count keys below zero,
    or give one family two states. The checksum and lineage are right: only the table's own check catches it."""
    unknown_state = bytearray(_with_column_families(ColumnFamilyState("default", True, 1)))
    state_at = unknown_state.index(b"\x00\x07default") + 9
    unknown_state[state_at] = 2
    cases = [
        ("reserved", _with_column_families(ColumnFamilyState("__statestore_meta", True, 1))),
        ("reserved", _with_column_families(ColumnFamilyState("", True, 1))),
        ("negative", _with_column_families(ColumnFamilyState("default", True, -1))),
        ("twice", _with_column_families(ColumnFamilyState("default", True, 1), ColumnFamilyState("default", False, 0))),
        ("unknown state", _resealed(bytes(unknown_state))),
    ]
    answers = java([f"decode-increment {data.hex()}" for _, data in cases])
    for (what, data), answer in zip(cases, answers, strict=True):
        assert answer.startswith("error: ") and what in answer, (what, answer)
        with pytest.raises(CorruptFileError, match=what):
            decode_increment(data)
    sound = _with_column_families(ColumnFamilyState("default", True, 1), ColumnFamilyState("other", False, 0))
    assert java([f"decode-increment {sound.hex()}"])[0].startswith("0/0/default 1 0 ")
    assert decode_increment(sound).column_families[1] == ColumnFamilyState("other", False, 0)
