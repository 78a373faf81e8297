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


def test_one_failing_event_does_not_end_the_driver_links_events_thread(tmp_path) -> None:
    """The driver link's events thread carries every later failover and drain. A query's stop the controller
    failed on (or any event that raises) ended it, and executors Spark removed afterwards were never failed
    over."""
    import json
    import socket

    from statestore.controller.driver_link import DriverLink
    from statestore.waiting import wait_for

    class Failing(_Controller):
        def attach_spark(self, levers: object) -> None:
            pass

        def query_stopped(self, run_id: str) -> int:
            raise RuntimeError("the controller failed on it")

    controller = Failing()
    link = DriverLink(tmp_path / "link.sock", controller)
    link.start()
    driver = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        driver.connect(str(tmp_path / "link.sock"))
        for event in ({"event": "query_stopped", "run_id": "r1"}, {"event": "executor_removed"},  # no executor id
                      {"event": "from a newer plugin"},  # its log line once crashed the thread too
                      {"event": "executor_removed", "executor": "3", "reason": "killed"}):  # fmt: skip
            driver.sendall((json.dumps(event) + "\n").encode())
        wait_for(lambda: controller.lost == ["3"], 10, "the later executor's failover")
    finally:
        driver.close()
        link.stop()


def test_a_drain_that_must_wait_is_said_once() -> None:
    import logging

    controller = _Controller()
    events = SparkEvents(controller)
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("statestore.controller.steering")
    logger.addHandler(handler)
    try:
        for _ in range(3):
            events.decommissioning(["3"])
    finally:
        logger.removeHandler(handler)
    assert controller.drains == ["3", "3", "3"]  # asked again at each call
    assert sum("decommission_waits" in record.getMessage() for record in records) == 1
