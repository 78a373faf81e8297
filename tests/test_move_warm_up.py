"""The executor's warm-up for moved partitions (MoveWarmUp.java): after it, the first batch of a partition loaded
with its last increment pending no longer hits a JIT trap in the store's path that throws compiled code away
(the trap is HotSpot's for a branch its profile never saw taken: here, a store with a partial merge)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import java_check

# The store's branches only a moved partition's first batch takes (StoreSession.overlaid's partial store,
# PartialMerge.pending, a KeyPresence miss).
STORE_PATH = ("StoreSession overlaid", "PartialMerge pending", "KeyPresence$Table lookup")


@pytest.fixture(scope="module")
def check(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return java_check(tmp_path_factory, "MoveWarmUpCheck", "256m")


def traps_in_store_path(check: list[str], mode: str, tmp_path: Path) -> list[str]:
    """The JIT traps hit in the store's path from the moment the pending store comes (the warm-up's own come
    before), from the JVM's compilation log (-Xbatch: compiled in the foreground, so the compiled code is in place
    when the pending store comes)."""
    log = tmp_path / f"{mode}.jit.log"
    java, *rest = check
    command = [java, "-Xbatch", "-XX:+UnlockDiagnosticVMOptions", "-XX:+LogCompilation", f"-XX:LogFile={log}", *rest]
    out = subprocess.run([*command, mode, str(tmp_path / mode)], check=True, capture_output=True, text=True).stdout
    assert out.strip().endswith("done")
    since = int(re.search(r"pending store at (\d+)", out).group(1)) / 1000
    text = log.read_text(errors="replace")
    traps = re.findall(
        r"<uncommon_trap thread='\d+' reason='([a-z_0-9]+)'[^>]*stamp='([0-9.]+)'>(.*?)</uncommon_trap>", text, re.S
    )
    hit = []
    for reason, stamp, body in traps:
        if float(stamp) < since:
            continue
        first = re.search(r"<jvms bci='\d+' method='([^']+)'", body)
        method = first.group(1).replace("io.statestore.spark.", "") if first else ""
        if method.startswith(STORE_PATH):
            hit.append(f"{reason} in {method}")
    return hit


def test_without_the_warm_up_a_pending_store_traps_in_compiled_code(check: list[str], tmp_path: Path) -> None:
    """The cost the warm-up removes is real: without it the pending store's first calls trap."""
    assert any("StoreSession overlaid" in t for t in traps_in_store_path(check, "cold", tmp_path))


def test_after_the_warm_up_a_pending_store_runs_the_compiled_code(check: list[str], tmp_path: Path) -> None:
    assert traps_in_store_path(check, "warm", tmp_path) == []
