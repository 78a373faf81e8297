"""The provider on several executor JVMs (master local-cluster[2,1,1024]): the jar ships through
spark.jars, every executor keeps its own local stores, and results match Spark's RocksDB provider."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import make_spark
from test_provider_operators import EVENTS, RESTART_AFTER, events


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """A two-executor local cluster for this module only."""
    session = make_spark(master="local-cluster[2,1,1024]", app="statestore-cluster-test")
    yield session
    session.stop()


def test_aggregation_on_two_executors_matches_spark(equivalence: Any, spark: Any) -> None:
    from pyspark.sql import functions as F

    def build(spark: Any, s: dict[str, Any]) -> Any:
        return s["events"].groupBy("k").agg(F.sum("v").alias("s"), F.count("*").alias("n"))

    equivalence({"events": EVENTS}, build, "update", events(11), RESTART_AFTER)
    assert spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() >= 3  # driver + 2 executors
