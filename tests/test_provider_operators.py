"""Every stateful operator our provider serves gives the same results as Spark's RocksDB provider, across
a stop and a restart from the checkpoint (DESIGN.md section 7)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

BATCHES = 6
RESTART_AFTER = 3
EVENTS = "id long, k string, v long, ts timestamp"
T0 = datetime(2024, 1, 1)


def events(seed: int, per_batch: int = 25, keys: int = 7, late_fraction: float = 0.2) -> list[dict]:
    """Batches of events whose time advances ~10 s per batch, with some late rows and repeated ids."""
    rng = random.Random(seed)
    out = []
    next_id = 0
    for b in range(BATCHES):
        rows = []
        for _ in range(per_batch):
            lag = rng.randint(10, 40) if rng.random() < late_fraction else rng.randint(0, 9)
            ts = T0 + timedelta(seconds=max(0, b * 10 + rng.randint(0, 9) - lag))
            ident = rng.randint(0, next_id) if next_id and rng.random() < 0.3 else next_id
            next_id += 1
            rows.append({"id": ident, "k": f"k{rng.randrange(keys)}", "v": rng.randint(-5, 100),
                         "ts": ts.isoformat(sep=" ")})
        out.append({"events": rows})
    return out


def test_aggregation_update_mode(equivalence: Any) -> None:
    from pyspark.sql import functions as F

    def build(spark: Any, s: dict[str, Any]) -> Any:
        return s["events"].groupBy("k").agg(F.sum("v").alias("s"), F.count("*").alias("n"), F.max("v"))

    equivalence({"events": EVENTS}, build, "update", events(1), RESTART_AFTER)


def test_aggregation_complete_mode_matches_recomputation(equivalence: Any, spark: Any) -> None:
    from pyspark.sql import functions as F

    batches = events(2)

    def build(spark: Any, s: dict[str, Any]) -> Any:
        return s["events"].groupBy("k").agg(F.sum("v").alias("s"), F.count("*").alias("n"))

    ours = equivalence({"events": EVENTS}, build, "complete", batches, RESTART_AFTER)
    totals: dict[str, tuple[int, int]] = {}
    for batch in batches:
        for r in batch["events"]:
            s, n = totals.get(r["k"], (0, 0))
            totals[r["k"]] = (s + r["v"], n + 1)
    assert sorted(ours[-1][1]) == sorted((k, s, n) for k, (s, n) in totals.items())


def test_aggregation_append_mode_with_watermark(equivalence: Any) -> None:
    from pyspark.sql import functions as F

    def build(spark: Any, s: dict[str, Any]) -> Any:
        return (s["events"].withWatermark("ts", "5 seconds")
                .groupBy(F.window("ts", "10 seconds"), "k").agg(F.count("*").alias("n"), F.sum("v")))

    equivalence({"events": EVENTS}, build, "append", events(3), RESTART_AFTER)


def test_session_windows(equivalence: Any) -> None:
    from pyspark.sql import functions as F

    def build(spark: Any, s: dict[str, Any]) -> Any:
        return (s["events"].withWatermark("ts", "5 seconds")
                .groupBy(F.session_window("ts", "4 seconds"), "k").agg(F.count("*").alias("n"), F.sum("v")))

    equivalence({"events": EVENTS}, build, "append", events(4, keys=4), RESTART_AFTER)


def test_drop_duplicates(equivalence: Any) -> None:
    def build(spark: Any, s: dict[str, Any]) -> Any:
        return s["events"].dropDuplicates(["id"]).select("id", "k", "v")

    equivalence({"events": EVENTS}, build, "append", events(5), RESTART_AFTER)


def test_drop_duplicates_within_watermark(equivalence: Any) -> None:
    def build(spark: Any, s: dict[str, Any]) -> Any:
        return s["events"].withWatermark("ts", "10 seconds").dropDuplicatesWithinWatermark(["id"]).select("id", "k")

    equivalence({"events": EVENTS}, build, "append", events(6), RESTART_AFTER)


def join_batches(seed: int) -> list[dict]:
    """Two streams: impressions and clicks on the same ad ids, clicks a few seconds later, some never."""
    rng = random.Random(seed)
    out = []
    for b in range(BATCHES):
        imps, clicks = [], []
        for i in range(15):
            ad = b * 100 + i
            ts = T0 + timedelta(seconds=b * 10 + rng.randint(0, 9))
            imps.append({"ad": ad, "ts": ts.isoformat(sep=" ")})
            if rng.random() < 0.6:
                cts = ts + timedelta(seconds=rng.randint(0, 12))
                clicks.append({"ad": ad, "cts": cts.isoformat(sep=" ")})
        out.append({"imps": imps, "clicks": clicks})
    return out


JOIN_SCHEMAS = {"imps": "ad long, ts timestamp", "clicks": "ad long, cts timestamp"}


def _join(how: str) -> Any:
    def build(spark: Any, s: dict[str, Any]) -> Any:
        from pyspark.sql import functions as F

        imps = s["imps"].withWatermark("ts", "5 seconds")
        clicks = s["clicks"].withColumnRenamed("ad", "cad").withWatermark("cts", "5 seconds")
        cond = F.expr("ad = cad AND cts >= ts AND cts <= ts + interval 15 seconds")
        return imps.join(clicks, cond, how).select("ad", "ts", "cad", "cts")

    return build


def test_stream_stream_inner_join(equivalence: Any) -> None:
    equivalence(JOIN_SCHEMAS, _join("inner"), "append", join_batches(7), RESTART_AFTER)


def test_stream_stream_left_outer_join(equivalence: Any) -> None:
    ours = equivalence(JOIN_SCHEMAS, _join("left_outer"), "append", join_batches(8), RESTART_AFTER)
    assert any(row[2] is None for _, rows in ours for row in rows), "no unmatched rows were emitted"


def test_apply_in_pandas_with_state_event_time_timeout(equivalence: Any) -> None:
    import pandas as pd
    from pyspark.sql.streaming.state import GroupStateTimeout

    def count_until_quiet(key: tuple, pdfs: Any, state: Any) -> Any:
        if state.hasTimedOut:
            (total,) = state.get
            state.remove()
            yield pd.DataFrame({"k": [key[0]], "total": [int(total)], "closed": [True]})
            return
        total = state.get[0] if state.exists else 0
        latest = 0
        for pdf in pdfs:
            total += int(pdf["v"].sum())
            latest = max(latest, int(pdf["ts"].max().timestamp() * 1000))
        state.update((total,))
        state.setTimeoutTimestamp(max(latest, state.getCurrentWatermarkMs()) + 10_000)
        yield pd.DataFrame({"k": [key[0]], "total": [int(total)], "closed": [False]})

    def build(spark: Any, s: dict[str, Any]) -> Any:
        return (s["events"].withWatermark("ts", "5 seconds").groupBy("k").applyInPandasWithState(
            count_until_quiet, "k string, total long, closed boolean", "total long", "update",
            GroupStateTimeout.EventTimeTimeout))

    batches = events(9, keys=5)
    # keys that go quiet, so that their state times out
    for b, batch in enumerate(batches):
        batch["events"] = [r for r in batch["events"] if b < 2 or r["k"] not in ("k0", "k1")]
    ours = equivalence({"events": EVENTS}, build, "update", batches, RESTART_AFTER)
    assert any(row[2] for _, rows in ours for row in rows), "no state timed out"
