"""Reading a streaming query's progress: how far a file source got, and where its partitions' state came from.
Shared by the demo, the benchmarks and the tests."""

from __future__ import annotations

import json
import re
from typing import Any

LOAD_SOURCES = ("local", "replica", "peer", "checkpoint")


def files_processed(query: Any) -> int:
    """How many input files of the query's (first) file source its committed micro-batches consumed, reading
    its last progress (a file source's offset is the index of the last file taken)."""
    progress = query.lastProgress
    if not progress or not progress["sources"]:
        return 0
    end = progress["sources"][0]["endOffset"]
    if not end:
        return 0
    if isinstance(end, str):
        # The offset's JSON, except on Spark 4.0, whose progress gives a Python dict's repr ("{'logOffset': 3}").
        found = re.search(r"logOffset['\"]?\s*:\s*(\d+)", end)
        if found:
            return int(found.group(1)) + 1
        parsed = json.loads(end)  # "null" before the source's first file (seen at a benchmark's start)
        return int(parsed["logOffset"]) + 1 if isinstance(parsed, dict) else 0
    return int(end["logOffset"]) + 1


def load_sources(progress: dict[str, Any]) -> dict[str, int]:
    """Per load source, how many state stores of one micro-batch's stateful operators took their state from it
    (the provider's `statestoreLoadSource*` metrics, summed over operators)."""
    totals = dict.fromkeys(LOAD_SOURCES, 0)
    for operator in progress.get("stateOperators", []):
        metrics = operator.get("customMetrics", {})
        for source in LOAD_SOURCES:
            totals[source] += int(metrics.get(f"statestoreLoadSource{source.capitalize()}", 0))
    return totals


def opened_ahead(progress: dict[str, Any]) -> int:
    """How many state stores of one micro-batch took their state from a replica copy their executor opened ahead
    of a planned move (the provider's `statestoreLoadOpenedAhead` metric, summed over operators)."""
    return sum(
        int(operator.get("customMetrics", {}).get("statestoreLoadOpenedAhead", 0))
        for operator in progress.get("stateOperators", [])
    )
