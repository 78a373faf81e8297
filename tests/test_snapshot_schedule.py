"""When the provider snapshots a partition (SnapshotSchedule.java): at the versions v with v + partition a multiple
of minDeltasForSnapshot, whatever version its provider loaded, so that a query's partitions keep snapshotting in
different micro-batches after a migration, a failover or a restart moved some of them."""

from __future__ import annotations

import subprocess

import pytest
from conftest import java_check

PARTITIONS = 8
LOADS = 40


@pytest.fixture(scope="module")
def schedule_check(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The command line of SnapshotScheduleCheck, compiled against the provider jar."""
    return java_check(tmp_path_factory, "SnapshotScheduleCheck", "128m")


def snapshots(check: list[str], every: int) -> dict[tuple[int, int], list[int]]:
    """(partition, version loaded) -> the versions snapshotted over the next 3 * `every` commits."""
    out = subprocess.run([*check, str(PARTITIONS), str(LOADS), str(every)], check=True, capture_output=True,
                         text=True).stdout  # fmt: skip
    found = {}
    for line in out.splitlines():
        partition, loaded, *versions = (int(word) for word in line.split())
        found[partition, loaded] = versions
    return found


@pytest.mark.parametrize("every", [10, 3, 1])
def test_a_partition_snapshots_in_its_own_slots_whatever_version_it_loaded(schedule_check, every: int) -> None:
    found = snapshots(schedule_check, every)
    assert len(found) == PARTITIONS * LOADS
    for (partition, loaded), versions in found.items():
        slots = [v for v in range(loaded + 1, loaded + 3 * every + 1) if (v + partition) % every == 0]
        assert versions == slots, (partition, loaded, versions)


def test_partitions_moved_at_different_versions_still_snapshot_in_different_micro_batches(schedule_check) -> None:
    found = snapshots(schedule_check, 10)
    # As a migration leaves them: each partition's provider loaded at a version of its own.
    loaded = {partition: 20 + 3 * partition % 7 for partition in range(PARTITIONS)}
    taken = [v for partition, at in loaded.items() for v in found[partition, at] if v > 30]
    assert len(taken) == len(set(taken)), sorted(taken)
