"""Feeding a streaming file source one file per micro-batch, in order: for the demo, the benchmarks and the tests.

The file source takes files in modification-time order, so each file gets the time `EPOCH + index`. It is
timed before it appears: a file the source lists between its rename and a later `utime` carries the time of
its creation (today), and every file timed after it (`EPOCH` is years earlier) then counts as older than the
source's `maxFileAge` and is never read.
"""

from __future__ import annotations

import os
from pathlib import Path

EPOCH = 1_700_000_000


def publish(folder: Path, index: int, text: str, digits: int = 5) -> Path:
    """Input file `index` (`b<index>.json`, `digits` wide) with content `text`: written under a hidden name,
    timed `EPOCH + index`, then renamed into place (replacing an earlier one). Returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    name = f"b{index:0{digits}d}.json"
    tmp = folder / f".{name}.tmp"
    tmp.write_text(text)
    os.utime(tmp, (EPOCH + index, EPOCH + index))
    target = folder / name
    tmp.replace(target)
    return target
