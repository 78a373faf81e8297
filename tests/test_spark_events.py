"""The controller's handling of Spark's executor events (statestore.controller.spark_events): a decommissioning
executor is drained once, retried while another operation must end first, and what was kept of it goes when Spark
removes it (executors come and go for an application's whole life)."""

from __future__ import annotations

from statestore.controller.spark_events import SparkEvents


class _Controller:
    """Records the calls; a drain starts (operation 7) once `ready`."""

    def __init__(self) -> None:
        self.ready = False
        self.drains: list[str] = []
        self.lost: list[str] = []

    def executors_decommissioning(self, executor_ids: list[str]) -> dict[str, int | None]:
        self.drains.append(",".join(executor_ids))
        return dict.fromkeys(executor_ids, 7 if self.ready else None)

    def executor_lost(self, executor_id: str, steer: object) -> list:
        self.lost.append(executor_id)
        return []


def test_a_decommissioned_executor_is_drained_once_and_forgotten_when_removed() -> None:
    controller = _Controller()
    events = SparkEvents(controller)
    events.decommissioning(["3", "4"])  # another operation runs: retried at the next call, together
    controller.ready = True
    events.decommissioning(["3", "4"])
    events.decommissioning(["3", "4"])  # drained already: not again
    assert controller.drains == ["3,4", "3,4"] and events.drained == {"3": 7, "4": 7}
    events.executor_removed("3", "decommissioned", lambda _steer: None)
    assert controller.lost == ["3"] and events.drained == {"4": 7}
