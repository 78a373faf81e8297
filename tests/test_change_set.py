"""The provider's change set (ChangeSet.java: the commit's writes kept in the increment body's own shape) against a
model of formats.md 3.2: random writes, rewrites, merges, deletes and column-family drops in one commit; the
increment it encodes, decoded by the Python reader, holds at most one record per key, with the net change."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest
from conftest import java_check

from statestore.increment import Op, read_increment


@pytest.fixture(scope="module")
def change_set_check(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The command line of ChangeSetCheck, compiled against the provider jar."""
    return java_check(tmp_path_factory, "ChangeSetCheck", "256m")


def _model(lines: list[str]) -> tuple[set[str], set[str], dict[tuple[str, bytes], tuple[Op, bytes]]]:
    """formats.md 3.2: the column families dropped (each gets a drop record), those written or created after
    (listed as existing), and per key its one net record."""
    dropped: set[str] = set()
    created: set[str] = set()
    present: set[str] = set()
    net: dict[tuple[str, bytes], tuple[Op, bytes]] = {}
    for line in lines:
        word = line.split(" ")
        cf = word[1]
        if word[0] == "drop":
            net = {k: v for k, v in net.items() if k[0] != cf}
            present.discard(cf)
            if cf in created:
                created.discard(cf)
            else:
                dropped.add(cf)
            continue
        present.add(cf)
        if word[0] == "create":
            created.add(cf)
            continue
        key = bytes.fromhex(word[2])
        if word[0] == "put":
            net[cf, key] = (Op.PUT, bytes.fromhex(word[3] if len(word) > 3 else ""))
        elif word[0] == "delete":
            net[cf, key] = (Op.DELETE, b"")
        else:
            operand = bytes.fromhex(word[3])
            op, value = net.get((cf, key), (None, b""))
            if op is None:
                net[cf, key] = (Op.MERGE, operand)
            elif op == Op.DELETE:
                net[cf, key] = (Op.PUT, operand)
            else:
                net[cf, key] = (op, value + operand)
    return dropped, present, net


def _random_commit(rng: random.Random, writes: int, keys: int) -> list[str]:
    lines = []
    for _ in range(writes):
        cf = rng.choice(["default", "default", "left", "right"])
        roll = rng.random()
        if roll < 0.01:
            lines.append(f"drop {cf}")
        elif roll < 0.02:
            lines.append(f"create {cf}")
        else:
            key = rng.randrange(keys).to_bytes(4, "big").hex()
            value = rng.randbytes(rng.randrange(0, 12)).hex()
            if roll < 0.6:
                lines.append(f"put {cf} {key} {value}".rstrip())
            elif roll < 0.8:
                lines.append(f"merge {cf} {key} {value or '00'}")
            else:
                lines.append(f"delete {cf} {key}")
    return lines


@pytest.mark.parametrize(("seed", "writes", "keys"), [(1, 50, 10), (2, 3000, 400), (3, 20000, 30000), (4, 2000, 5)])
def test_the_increment_holds_each_keys_net_change_once(
    change_set_check: list[str], tmp_path: Path, seed: int, writes: int, keys: int
) -> None:
    lines = _random_commit(random.Random(seed), writes, keys)
    out = tmp_path / "1.increment"
    subprocess.run([*change_set_check, str(out)], input="\n".join(lines) + "\n", check=True, capture_output=True,
                   text=True, timeout=120)  # fmt: skip
    increment = read_increment(out)
    dropped, present, net = _model(lines)
    records = list(increment.records())
    drops = [cf for op, cf, _, _ in records if op == Op.DROP_COLUMN_FAMILY]
    found = {(cf, key): (op, value) for op, cf, key, value in records if op != Op.DROP_COLUMN_FAMILY}
    assert len(found) == len(records) - len(drops), "a key has two records"
    assert found == net
    # Each drop once, before every record (records apply in file order); a column family dropped and not written
    # or created again is listed as gone, every other one touched as existing.
    assert sorted(drops) == sorted(dropped)
    assert all(op == Op.DROP_COLUMN_FAMILY for op, *_ in records[: len(drops)])
    listed = {cf.name: cf.exists for cf in increment.column_families}
    assert listed == {**{cf: False for cf in dropped - present}, **{cf: True for cf in present}}


def test_a_commit_whose_keys_were_each_written_once_encodes_in_bulk_the_same(
    change_set_check: list[str], tmp_path: Path
) -> None:
    lines = [f"put default {i.to_bytes(4, 'big').hex()} {bytes([i % 251]).hex() * 3}" for i in range(5000)]
    for level in ("0", "1"):
        out = tmp_path / f"{level}.increment"
        subprocess.run([*change_set_check, str(out), level], input="\n".join(lines) + "\n", check=True,
                       capture_output=True, text=True, timeout=120)  # fmt: skip
        records = list(read_increment(out).records())
        assert [(op, key, value) for op, _, key, value in records] == [
            (Op.PUT, i.to_bytes(4, "big"), bytes([i % 251]) * 3) for i in range(5000)
        ]


def test_a_key_rewritten_many_times_in_one_commit_keeps_only_about_its_live_bytes(
    change_set_check: list[str], tmp_path: Path
) -> None:
    """A batch that rewrites a key per input row (a list state appended row by row) kept every superseded value
    until its commit: 600 rewrites of a 1 MiB value are 600 MiB in a JVM of 256 MiB. Superseded records are
    reclaimed; records taken into the database before that stay counted as written."""
    lines = [
        "put default 01 aa",
        "put default 02 bb",
        "flush",  # both reach the database (LocalStore before a scan)
        "put default 02 cc",
        f"rewrite default 03 {1 << 20} 600",
        "flush",  # 02's rewrite and 03's last value: 01 stays written across the compaction
    ]
    out = tmp_path / "1.increment"
    done = subprocess.run([*change_set_check, str(out)], input="\n".join(lines) + "\n", capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    printed = done.stdout.split("\n")
    assert [line for line in printed if line.startswith("unwritten")] == ["unwritten 2", "unwritten 2"]
    held = int(next(line for line in printed if line.startswith("held")).split()[1])
    assert held < 4 << 20, held
    records = [(key, value) for _, _, key, value in read_increment(out).records()]
    assert records == [(b"\x01", b"\xaa"), (b"\x02", b"\xcc"), (b"\x03", bytes([599 % 251]) * (1 << 20))]
