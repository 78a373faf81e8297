"""The stateful operators the fault suite's query can run, each with its exact recomputation.

Every operator reads the same input (rows `{k, v}`, one file per micro-batch) and outputs rows a batch's
recorded output is compared with:

- `aggregation`: per key, the count and sum of `v` (update mode): `(k, n, s)` for each key the batch touched.
- `dropDuplicates`: the distinct `(k, v % 8)` pairs never seen before (append mode): `(k, b)`.
- `join`: a stream-stream inner join of the rows with an even `v` (left) and those with an odd `v` (right) on `k`
  (append mode, no watermark: both sides stay in state): `(k, left v, right v)` for each pair of rows of which
  at least one arrived in the batch.
- `applyInPandasWithState`: per key, a running count and sum kept in the group's state by a Python function
  (update mode): the same rows as `aggregation`, computed by other code over other state.

`expected(batches)` takes each batch's input rows, in batch order, and returns each batch's output rows, sorted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

Rows = list[tuple]


@dataclass(frozen=True)
class Operator:
    """One stateful operator: how to build it over the input stream, how to read an output row, the exact
    recomputation, and how many keys and rows per file suit it (a join's output grows with rows per key)."""

    name: str
    output_mode: str
    build: Callable[[Any], Any]
    columns: tuple[str, ...]
    expected: Callable[[list[list[dict]]], dict[int, Rows]]
    keys: int = 2000
    rows: int = 2000
    # Whether a key's last output carries its running totals (count in column 1): then lost and duplicated
    # updates are counted per key from the counts, else as output rows missing or repeated.
    running_count: bool = False

    def row(self, row: Any) -> list:
        """An output row as the suite records it."""
        return [row[c] if isinstance(row[c], str) else int(row[c]) for c in self.columns]


def _aggregate(stream: Any) -> Any:
    from pyspark.sql import functions as F

    return stream.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))


def _running_totals(batches: list[list[dict]]) -> dict[int, Rows]:
    totals: dict[str, tuple[int, int]] = {}
    expected = {}
    for batch, rows in enumerate(batches):
        touched = set()
        for row in rows:
            count, total = totals.get(row["k"], (0, 0))
            totals[row["k"]] = (count + 1, total + row["v"])
            touched.add(row["k"])
        if touched:
            expected[batch] = sorted((k, *totals[k]) for k in touched)
    return expected


def _deduplicate(stream: Any) -> Any:
    from pyspark.sql import functions as F

    return stream.select("k", (F.col("v") % 8).alias("b")).dropDuplicates(["k", "b"])


def _first_seen(batches: list[list[dict]]) -> dict[int, Rows]:
    seen: set[tuple[str, int]] = set()
    expected = {}
    for batch, rows in enumerate(batches):
        new = {(r["k"], r["v"] % 8) for r in rows} - seen
        seen |= new
        if new:
            expected[batch] = sorted(new)
    return expected


def _join(stream: Any) -> Any:
    from pyspark.sql import functions as F

    left = stream.where(F.col("v") % 2 == 0).select("k", F.col("v").alias("lv"))
    right = stream.where(F.col("v") % 2 == 1).select(F.col("k").alias("rk"), F.col("v").alias("rv"))
    return left.join(right, left.k == right.rk).select("k", "lv", "rv")


def _joined(batches: list[list[dict]]) -> dict[int, Rows]:
    left: dict[str, list[int]] = {}
    right: dict[str, list[int]] = {}
    expected = {}
    for batch, rows in enumerate(batches):
        new_left = [(r["k"], r["v"]) for r in rows if r["v"] % 2 == 0]
        new_right = [(r["k"], r["v"]) for r in rows if r["v"] % 2 == 1]
        out = [(k, lv, rv) for k, lv in new_left for rv in right.get(k, [])]
        for k, lv in new_left:
            left.setdefault(k, []).append(lv)
        out += [(k, lv, rv) for k, rv in new_right for lv in left.get(k, [])]
        for k, rv in new_right:
            right.setdefault(k, []).append(rv)
        if out:
            expected[batch] = sorted(out)
    return expected


def running_totals_in_pandas(key: tuple, frames: Iterator[Any], state: Any) -> Iterator[Any]:
    """applyInPandasWithState's function: the key's running count and sum, kept in its group state."""
    import pandas as pd

    count, total = state.get if state.exists else (0, 0)
    for frame in frames:
        count += len(frame)
        total += int(frame["v"].sum())
    state.update((count, total))
    yield pd.DataFrame({"k": [key[0]], "n": [count], "s": [total]})


def _in_pandas(stream: Any) -> Any:
    from pyspark.sql.streaming.state import GroupStateTimeout

    return stream.groupBy("k").applyInPandasWithState(
        running_totals_in_pandas, "k string, n long, s long", "n long, s long", "Update", GroupStateTimeout.NoTimeout
    )


OPERATORS: dict[str, Operator] = {
    "aggregation": Operator("aggregation", "update", _aggregate, ("k", "n", "s"), _running_totals, running_count=True),
    "dropDuplicates": Operator("dropDuplicates", "append", _deduplicate, ("k", "b"), _first_seen, keys=5000),
    "join": Operator("join", "append", _join, ("k", "lv", "rv"), _joined, keys=5000, rows=1000),
    "applyInPandasWithState": Operator(
        "applyInPandasWithState", "update", _in_pandas, ("k", "n", "s"), _running_totals, running_count=True
    ),
}


def available_operators() -> list[str]:
    """The operators this installation can run: applyInPandasWithState needs pandas (pyspark's `sql` extra)."""
    try:
        import pandas  # noqa: F401
    except ImportError:
        return [name for name in OPERATORS if name != "applyInPandasWithState"]
    return list(OPERATORS)


def update_differences(operator: Operator, expected: dict[int, Rows], recorded: dict[int, Rows]) -> tuple[int, int]:
    """(lost, duplicated) updates of a run. With running counts: per key at its last output, the input rows its
    count lacks or has twice. Otherwise: expected output rows never recorded, and recorded rows beyond those
    expected (over every batch judged, as multisets)."""
    if operator.running_count:
        last_expected: dict[str, int] = {}
        last_recorded: dict[str, int] = {}
        for batch, rows in sorted(expected.items()):
            last_expected.update({r[0]: r[1] for r in rows})
            last_recorded.update({r[0]: r[1] for r in recorded.get(batch, [])})
        lost = sum(max(0, n - last_recorded.get(k, 0)) for k, n in last_expected.items())
        duplicated = sum(max(0, n - last_expected.get(k, 0)) for k, n in last_recorded.items())
        return lost, duplicated
    wanted = Counter(r for rows in expected.values() for r in rows)
    got = Counter(r for rows in recorded.values() for r in rows)
    return sum((wanted - got).values()), sum((got - wanted).values())
