"""The provider's local store (LocalStore.java) against a model: a batch's puts and deletes stay in its change set
until commit and then go into RocksDB as one sorted write batch on a background thread (SortedWriteBatch.java).
Reads, scans and counts within a batch see its own writes; the next batch, a rollback and a reopened directory see
exactly the committed state, in every column family, with keys that share long prefixes and values whose lengths
need one to three varint bytes. A second store to which every commit's increment is applied (a load catching up:
sorted and serialized the same way, merges one by one) ends with the same state."""

from __future__ import annotations

import random
import subprocess
import zlib
from pathlib import Path

import pytest
from conftest import java_check

FAMILIES = ("default", "left", "right")


@pytest.fixture(scope="module")
def local_store_check(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The command line of LocalStoreCheck, compiled against the provider jar."""
    return java_check(tmp_path_factory, "LocalStoreCheck", "512m")


def _key(rng: random.Random, keys: int) -> bytes:
    """Keys as Spark's rows make them: eight shared zero bytes, then a number; some short, some a prefix of
    another."""
    n = rng.randrange(keys)
    if n % 7 == 0:
        return bytes([n % 5])  # one byte: sorts before the long keys
    return b"\0" * 8 + n.to_bytes(8, "little")[: 1 + n % 8]


def _value(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.05:
        return b""
    if roll < 0.1:
        return rng.randbytes(rng.randrange(128, 400))  # a two-byte varint length
    if roll < 0.11:
        return rng.randbytes(20_000)  # a three-byte varint length
    return rng.randbytes(rng.randrange(1, 40))


def _digest(entries: dict[bytes, bytes]) -> str:
    """What LocalStoreCheck prints for a scan: the number of entries and a CRC-32 over them in key order."""
    crc = 0
    for key, value in sorted(entries.items()):
        for part in (key, value):
            crc = zlib.crc32(part, zlib.crc32(len(part).to_bytes(4, "big"), crc))
    return f"{len(entries)} {crc}"


def _script(rng: random.Random, batches: int, writes: int, keys: int) -> tuple[list[str], list[str]]:
    """Operations and the output the model expects of them."""
    committed: dict[str, dict[bytes, bytes]] = {cf: {} for cf in FAMILIES}
    lines = ["begin", "create left", "create right"]
    expected: list[str] = []
    state = {cf: dict(kv) for cf, kv in committed.items()}
    version = 0
    scans = min(0.015, 30 / writes)  # a scan reads the whole family: a few per batch
    for batch in range(batches):
        if batch:
            lines.append("begin")
        for _ in range(writes):
            cf = rng.choice(FAMILIES)
            key = _key(rng, keys)
            roll = rng.random()
            if roll < 0.45:
                value = _value(rng)
                lines.append(f"put {cf} {key.hex()} {value.hex()}".rstrip())
                state[cf][key] = value
            elif roll < 0.6:
                lines.append(f"delete {cf} {key.hex()}")
                state[cf].pop(key, None)
            elif roll < 0.7 and batch % 2:  # even batches have no merge: their increments apply in one call
                operand = rng.randbytes(rng.randrange(1, 6))
                lines.append(f"merge {cf} {key.hex()} {operand.hex()}")
                state[cf][key] = state[cf].get(key, b"") + operand
            elif roll < 0.7:
                continue
            elif roll < 0.985 - scans:
                lines.append(f"get {cf} {key.hex()}")
                value = state[cf].get(key)
                expected.append("-" if value is None else value.hex())
            elif roll < 1 - scans:
                lines.append(f"count {cf}")
                expected.append(str(len(state[cf])))
            else:
                lines.append(f"scan {cf}")
                expected.append(_digest(state[cf]))
        if batch and rng.random() < 0.25:
            lines.append("rollback")
            state = {cf: dict(kv) for cf, kv in committed.items()}
            continue
        lines.append(rng.choice(["commit", "commit inline"]))
        version += 1
        committed = {cf: dict(kv) for cf, kv in state.items()}
        if rng.random() < 0.3:
            lines.append("reopen")
            expected.append(f"version {version}")
    for cf in FAMILIES:  # the last state, read through the database alone
        lines += ["begin", f"scan {cf}", f"count {cf}", f"mirror {cf}"]
        expected += [_digest(committed[cf]), str(len(committed[cf])), _digest(committed[cf])]
    return lines, expected


@pytest.mark.parametrize(
    ("seed", "batches", "writes", "keys"), [(1, 6, 40, 12), (2, 12, 3000, 2500), (3, 4, 30_000, 200_000)]
)
def test_a_batchs_writes_reach_the_database_at_commit_as_a_model_says(
    local_store_check: list[str], tmp_path: Path, seed: int, batches: int, writes: int, keys: int
) -> None:
    lines, expected = _script(random.Random(seed), batches, writes, keys)
    dirs = [str(tmp_path / "db"), str(tmp_path / "mirror")]
    run = subprocess.run([*local_store_check, *dirs], input="\n".join(lines) + "\n", capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    found = run.stdout.split("\n")[:-1]
    assert len(found) == len(expected)
    for i, (got, want) in enumerate(zip(found, expected, strict=True)):
        assert got == want, f"output line {i}: {got[:200]!r} != {want[:200]!r}"


def test_keys_that_share_every_byte_but_the_last_sort_in_bytewise_order(
    local_store_check: list[str], tmp_path: Path
) -> None:
    keys = [b"\0" * 8 + bytes([a, b]) for a in (0, 1, 255) for b in (0, 128, 255)] + [b"\0" * 8, b"\0" * 8 + b"\1"]
    rng = random.Random(4)
    rng.shuffle(keys)
    lines = ["begin", *(f"put default {k.hex()} {k.hex()}" for k in keys), "commit", "begin", "list default"]
    dirs = [str(tmp_path / "db"), str(tmp_path / "mirror")]
    run = subprocess.run([*local_store_check, *dirs], input="\n".join(lines) + "\n", capture_output=True, text=True,
                         timeout=120, check=True)  # fmt: skip
    assert run.stdout.split() == [f"{k.hex()}={k.hex()}" for k in sorted(keys)]
