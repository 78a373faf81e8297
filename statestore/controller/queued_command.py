"""An operator command given while another operation runs: it waits its turn, listed in `statestore status` as
`queued` behind the operation it waits for, and is planned when its turn comes (the cluster may have changed
meanwhile: a partition moved, an executor lost), so a plan is never carried out stale. A command that can no
longer be planned then ends `failed` with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from handover.handover import HandOver
from statestore.rpc import control_pb2

# What plans a command when its turn comes: its moves and notes (raises OperationError when it cannot be planned).
Plan = Callable[[], tuple[list[HandOver], list[str]]]


@dataclass
class QueuedCommand:
    """A command waiting for the running operation (and those queued before it) to end."""

    operation_id: int
    kind: str
    strategy: str
    plan: Plan
    behind: int  # the operation it waits for, as it was queued
    undo: Callable[[], None] | None = None  # what a failed plan must take back (a drain's mark)
    queued_at: float = field(default_factory=time.monotonic)
    error: str = ""
    ended_at: float | None = None

    @property
    def running(self) -> bool:
        """Never: it waits (`Operations` counts running operations)."""
        return False

    def fail(self, why: str) -> None:
        """Its turn came and it could not be planned."""
        self.error = why
        self.ended_at = time.monotonic()

    def status(self) -> control_pb2.OperationStatus:
        """As `statestore status` and `--wait` show it: `queued` (with what it waits for) or `failed`."""
        waited = (self.ended_at or time.monotonic()) - self.queued_at
        return control_pb2.OperationStatus(
            operation_id=self.operation_id,
            kind=self.kind,
            strategy=self.strategy,
            state="failed" if self.error else "queued",
            error=f"could not be planned when its turn came: {self.error}" if self.error else "",
            seconds=waited,
            notes=[f"queued behind operation {self.behind}: planned and started when it ends"],
        )
