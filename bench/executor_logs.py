"""What our provider's loads did, counted from a local-cluster application's executor logs.

local-cluster keeps each executor's stderr under `<pyspark>/work/<application id>/<executor id>/stderr`. The
provider logs each load (`loaded <store> version V from <source> ...`) and each materialize that stopped waiting
for its own partition's hand-over notice (`... goes ahead before the node heard of its hand-over`, after waiting
out `materialize_timeout_ms`); a materialize the node did not answer in time says `did not answer within`.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

_LOADED = re.compile(r"statestore: loaded \S+ version (?P<version>\d+) from (?P<source>\w+)")
_WAITED_OUT = ("goes ahead before the node heard of its hand-over", "did not answer within")


def executor_log_dir(spark: Any) -> Path:
    """Where local-cluster keeps this application's executor logs."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "work" / spark.sparkContext.applicationId


def load_outcomes(spark: Any) -> dict[str, int]:
    """Loads of stores past version 0 by source (`replica`, `checkpoint`, `peer`, ...) and `materialize_timeouts`:
    loads that waited out `materialize_timeout_ms`. Version-0 loads (a new store) are counted as `new`."""
    counts: Counter[str] = Counter()
    for stderr in sorted(executor_log_dir(spark).glob("*/stderr")):
        for line in stderr.read_text(errors="replace").splitlines():
            if "statestore" not in line:
                continue
            if any(marker in line for marker in _WAITED_OUT):
                counts["materialize_timeouts"] += 1
            match = _LOADED.search(line)
            if match is not None:
                counts["new" if match["version"] == "0" else match["source"]] += 1
    counts.setdefault("materialize_timeouts", 0)
    return dict(counts)
