"""A replica link's partition lanes (statestore.node.partition_lanes): one partition's jobs in order, and a job that
raises ends neither its lane nor the others'."""

from __future__ import annotations

import threading

from statestore.node.partition_lanes import PartitionLanes


def test_a_job_that_raises_does_not_stop_its_partitions_later_jobs() -> None:
    lanes = PartitionLanes(2, "test-lane")
    done: list[tuple[str, int]] = []
    finished = threading.Event()

    def job(key: str, n: int) -> None:
        if (key, n) == ("a", 1):
            raise RuntimeError("a job that did not handle its own error")
        done.append((key, n))
        if len(done) == 5:
            finished.set()

    for n in range(3):
        for key in ("a", "b"):
            lanes.submit(key, lambda k=key, i=n: job(k, i))
    assert finished.wait(10), done
    lanes.shutdown()
    assert [n for k, n in done if k == "a"] == [0, 2] and [n for k, n in done if k == "b"] == [0, 1, 2]
