"""Partial-state merge (DESIGN.md section 4, issue 11 item 2) through the provider's own Java code beside a real
state node (tests/test_partial_merge_harness.py, PartialMergeCheck.java): the node holds a replica at version
v-1, the checkpoint location holds increment v, and the batch on version v starts while increment v is held back
by the `last-increment` fault point. The batch's blind writes go on before the increment arrives, reads wait
until the key's value at v is known, and the state committed, the RocksDB contents and the increment written are
byte for byte those of the plain path (partial merge off, same delay)."""

from __future__ import annotations

import random
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_partial_merge_harness import PARTITION, Outcome, PartialRig, Run, partial_rig

pytestmark = pytest.mark.skipif(shutil.which("javac") is None or shutil.which("java") is None, reason="needs a JDK")

VERSIONS = 4  # the history: versions 1..4; the replica at 3; the batch loads 4 and commits 5
DELAY_MS = 1500  # the increment's read held back
APPLY_DELAY_MS = 700  # then its apply (with partial merge): reads of keys it does not touch go on meanwhile

# The batch of the main scenario, each line with what it is. Increment 4 (PartialMergeCheck's `small` history)
# puts d_i unless (i+4) % 3 == 0, then removes d1, d6, d11, d16; merges an operand into l0, l2, l4, l6, l8 and
# removes l3; it does not touch s0..s9, d2, d5, d8, d14, d17, l1, l5, l7, l9.
SCENARIO: list[tuple[str, str]] = [
    ("create-list", "blind"),
    ("put default b0 blind0", "blind"),  # a new key
    ("put default d0 over0", "blind"),  # a key the increment puts
    ("remove default d3", "blind"),  # a key the increment puts
    ("remove default d2", "blind"),  # a key it does not touch
    ("merge list l0 m0", "blind"),  # an operand after the increment's operand
    ("merge list l3 m3", "blind"),  # onto a key the increment removes
    ("merge list l1 m1", "blind"),  # onto a key it does not touch
    ("putList list l5 p5a,p5b", "blind"),
    ("mergeList list l6 q6a,q6b", "blind"),
    ("put default b1 blind1", "blind"),
    ("merge list l5 p5c", "blind"),  # onto the batch's own putList
    ("get default b0", "own"),  # the batch's own put answers at once
    ("get default d3", "own"),  # the batch's own remove
    ("exists default d0", "own"),
    ("values list l5", "own"),  # the batch's putList and merge
    ("get default s3", "untouched"),  # waits until the increment is decoded, not until it is applied
    ("values list l1", "untouched"),  # its value at v-1 (= at v), then the batch's operand
    ("get default d5", "untouched"),
    ("get default d4", "touched"),  # waits until it is applied
    ("values list l0", "touched"),
    ("get default d6", "touched"),
    ("values list l3", "after"),
    ("put default d4 after4", "after"),
    ("scan default", "after"),
    ("scan list", "after"),
]
BLIND_WRITES = sum(1 for line, kind in SCENARIO if kind == "blind" and line != "create-list")


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PartialRig]:
    with partial_rig(tmp_path_factory.mktemp("partial")) as r:
        yield r


@pytest.fixture(scope="module")
def history(rig: PartialRig) -> Path:
    return rig.history("small", "small", VERSIONS)


def _pair(
    rig: PartialRig, history: Path, name: str, script: list[str], delay_ms: int, apply_delay_ms: int
) -> tuple[Outcome, Outcome]:
    """The same batch with partial merge on and off, each on its own copy of the history."""
    runs = [
        Run(f"{name}-{mode}", rig.copy(history, f"{name}-{mode}", VERSIONS - 1), VERSIONS, mode == "on", script,
            delay_ms, apply_delay_ms)
        for mode in ("on", "off")
    ]
    outcomes = rig.batches(runs)
    return outcomes[runs[0].label], outcomes[runs[1].label]


def _same_state(on: Outcome, off: Outcome) -> None:
    """The reads, the RocksDB contents after the commit and the increment committed are the plain path's."""
    assert [(o["kind"], o["result"]) for o in on.ops()] == [(o["kind"], o["result"]) for o in off.ops()]
    assert on.event("commit")["version"] == off.event("commit")["version"] == str(VERSIONS + 1)
    assert on.dump and on.dump == off.dump
    assert on.run.increment(VERSIONS + 1) == off.run.increment(VERSIONS + 1)


def test_writes_go_on_before_the_increment_reads_wait_and_the_state_is_the_plain_paths(
    rig: PartialRig, history: Path
) -> None:
    on, off = _pair(rig, history, "main", [line for line, _ in SCENARIO], DELAY_MS, APPLY_DELAY_MS)
    for outcome in (on, off):
        load = outcome.event("load")
        assert (load["source"], load["from"]) == ("replica", str(VERSIONS - 1)), load
    assert on.event("load")["partial"] == "true" and off.event("load")["partial"] == "false"
    # The plain path waited for the increment inside the load; the partial one handed the store out at once.
    assert off.us("load", "end") >= DELAY_MS * 1000
    pending = on.event("pending")
    decoded, applied = int(pending["decoded"]), int(pending["applied"])
    assert decoded >= DELAY_MS * 1000 and applied >= decoded + APPLY_DELAY_MS * 1000, pending
    assert on.us("load", "end") < decoded

    ops = on.ops()
    assert len(ops) == len(SCENARIO)
    for op, (line, kind) in zip(ops, SCENARIO, strict=True):
        end = int(op["end"])
        if kind in ("blind", "own"):
            assert end < decoded, (line, op, pending)  # did not wait for the increment
        elif kind == "untouched":
            assert decoded <= end < applied, (line, op, pending)  # waited until it was known not to touch the key
        elif kind == "touched":
            assert end >= applied, (line, op, pending)  # waited until it was applied
    assert int(pending["overlay"]) == BLIND_WRITES, pending
    # Three reads answered from the store at v-1; the first read of a touched key waited and merged the overlay,
    # the rest went to the store directly.
    assert (pending["base_reads"], pending["waited_reads"]) == ("3", "1"), pending
    assert f"overlay took {BLIND_WRITES} writes before increment {VERSIONS} arrived" in pending["summary"]
    metrics = on.event("metrics")
    assert metrics["overlayWrites"] == str(BLIND_WRITES) and int(metrics["pendingMs"]) >= DELAY_MS, metrics
    assert off.event("metrics")["overlayWrites"] == "0"

    results = {line: op["result"] for op, (line, _) in zip(ops, SCENARIO, strict=True)}
    assert results["get default s3"] == "stable3"
    assert results["get default d5"] == "v3-5"
    assert results["get default d4"] == "v4-4"  # the increment's value
    assert results["get default d6"] == "null"  # the increment removed it
    assert results["values list l0"].endswith("u4-0,m0]")  # the batch's operand after the increment's
    assert results["values list l1"] == "[u1-1,u3-1,m1]"
    assert results["values list l3"] == "[m3]"
    assert results["values list l5"] == "[p5a,p5b,p5c]"
    _same_state(on, off)


def _random_script(seed: int) -> list[str]:
    """A batch of random writes and reads over keys the increment touches and keys it does not; writes first,
    so that the overlay takes some, and now and then a scan, which waits for the whole store."""
    rnd = random.Random(seed)
    default_keys = [f"d{i}" for i in range(20)] + [f"s{i}" for i in range(5)] + [f"n{i}" for i in range(4)]
    list_keys = [f"l{i}" for i in range(10)] + [f"m{i}" for i in range(3)]
    script = ["create-list"]
    for i in range(40):
        if i < 6:
            kind = rnd.choice(["put", "remove", "merge", "putList", "mergeList"])
        else:
            kind = rnd.choice(["put", "remove", "merge", "putList", "mergeList", "get", "get", "values", "values",
                               "exists", "scan"])
        value = f"r{seed}-{i}"
        if kind in ("put", "remove", "get", "exists"):
            cf = "default" if kind != "remove" or rnd.random() < 0.6 else "list"
            key = rnd.choice(default_keys if cf == "default" else list_keys)
            script.append(f"{kind} {cf} {key} {value}" if kind == "put" else f"{kind} {cf} {key}")
        elif kind == "scan":
            if rnd.random() < 0.3:
                script.append(f"scan {rnd.choice(['default', 'list'])}")
        else:
            key = rnd.choice(list_keys)
            if kind in ("putList", "mergeList"):
                script.append(f"{kind} list {key} {value}a,{value}b")
            else:
                script.append(f"{kind} list {key} {value}" if kind == "merge" else f"{kind} list {key}")
    return script


def test_random_batches_give_the_plain_paths_state(rig: PartialRig, history: Path) -> None:
    seeds = range(5)
    runs = []
    for seed in seeds:
        for mode in ("on", "off"):
            label = f"random{seed}-{mode}"
            runs.append(Run(label, rig.copy(history, label, VERSIONS - 1), VERSIONS, mode == "on",
                            _random_script(seed), 300, 300))
    outcomes = rig.batches(runs)
    for seed in seeds:
        on, off = outcomes[f"random{seed}-on"], outcomes[f"random{seed}-off"]
        assert on.event("load")["partial"] == "true" and off.event("load")["partial"] == "false"
        assert int(on.event("pending")["overlay"]) >= 6, on.event("pending")
        assert not any(o["result"].startswith("ERROR") for o in on.ops()), on.ops()
        _same_state(on, off)


def test_a_partial_merge_off_setting_or_two_missing_increments_load_as_before(rig: PartialRig, history: Path) -> None:
    """A replica two increments behind is caught up inside the load, as without partial merge."""
    run = Run("behind-on", rig.copy(history, "behind-on", VERSIONS - 2), VERSIONS, True,
              ["create-list", "put default b0 x"], 300)
    outcome = rig.batches([run])[run.label]
    load = outcome.event("load")
    assert (load["source"], load["from"], load["partial"]) == ("replica", str(VERSIONS - 2), "false"), load
    assert outcome.us("load", "end") >= 300_000 and not outcome.has("pending")


def test_an_increment_that_cannot_be_applied_fails_the_task_not_the_state(rig: PartialRig, history: Path) -> None:
    """Increment 4 is damaged: the background read fails; the batch's blind write had gone on, its next read
    and its commit fail, nothing is committed; the retried load does not merge partially again (and fails on
    the damaged increment as the plain path does)."""
    root = rig.copy(history, "broken", VERSIONS - 1)
    increment = root / "0" / str(PARTITION) / f"{VERSIONS}.increment"
    data = bytearray(increment.read_bytes())
    data[len(data) // 2] ^= 0xFF
    increment.write_bytes(bytes(data))
    script = ["create-list", "put default b0 x", "merge list l0 y", "get default s3", "after-failure"]
    outcome = rig.batches([Run("broken", root, VERSIONS, True, script, 300)])["broken"]
    assert outcome.event("load")["partial"] == "true"
    results = [(o["kind"], o["result"]) for o in outcome.ops()]
    assert results[:3] == [("create-list", "ok"), ("put", "ok"), ("merge", "ok")], results
    assert results[3] == ("get", "ERROR:IllegalStateException"), results
    failed = outcome.event("commit_failed")
    assert "could not be applied" in failed["message"], failed
    assert not (root / "0" / str(PARTITION) / f"{VERSIONS + 1}.increment").exists()
    assert outcome.has("reload_failed") and not outcome.has("reload"), outcome.events
    assert "Corrupt" in outcome.event("reload_failed")["message"] or "checksum" in outcome.event(
        "reload_failed")["message"].lower(), outcome.event("reload_failed")
