"""Waiting on a condition rather than for a time: what the fault suite, the demo and the tests poll with."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    """The first truthy value of `condition()`, polled every `interval` seconds until `timeout`; TimeoutError
    naming `what` after that."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:g}s")
        time.sleep(interval)
