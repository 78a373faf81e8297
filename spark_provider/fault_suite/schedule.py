"""Seeded random schedules of operator commands and faults (`statestore faults --schedule random`), and the file
that replays one (`--replay FILE`).

A schedule is a list of events, one before each micro-batch the suite feeds: an operator command (`move` of a
partition, `drain` of an executor, `rebalance`; each strategy; some waited for, most left running, so that
later events meet them), or a fault (kill -9 of an executor JVM or of a state node, a node restarted on an empty
directory, a fault on every link into the nodes or on the nodes' link to the controller, healed after the batch).
Which executor or partition an event acts on is an index, resolved against the live executors when it runs, so
that a schedule replays the same way on a cluster in the same state.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

STRATEGIES = ("batched", "fluid", "all-at-once")
COMMANDS = ("move", "move", "drain", "rebalance")
FAULTS = ("kill-executor", "kill-node", "restart-node-empty", "replication-link", "controller-link")
LINK_FAULTS = ("delay 300", "cut", "drop", "corrupt 3")


@dataclass(frozen=True)
class Event:
    """One step of a schedule. `pick`: which live executor (index into them, sorted) a command targets or a
    fault hits; `partition`: which of the query's partitions a move takes; `wait`: a command is waited for
    before the next event; `fault`: a link fault's kind."""

    kind: str
    pick: int = 0
    partition: int = 0
    strategy: str = ""
    wait: bool = False
    fault: str = ""

    def describe(self) -> str:
        """The event in a few words, as the report lists it."""
        if self.kind in ("move", "drain", "rebalance"):
            target = {
                "move": f" partition {self.partition} to executor #{self.pick}",
                "drain": f" executor #{self.pick}",
            }
            waited = "waited" if self.wait else "not waited"
            return f"{self.kind}{target.get(self.kind, '')} ({self.strategy}, {waited})"
        if self.kind in ("replication-link", "controller-link"):
            return f"{self.kind} {self.fault} for one batch"
        return f"{self.kind} #{self.pick}"


def random_schedule(seed: int, events: int, partitions: int) -> list[Event]:
    """`events` events drawn from `seed`: about half commands, half faults."""
    rng = random.Random(seed)
    found = []
    for _ in range(events):
        if rng.random() < 0.5:
            kind = rng.choice(COMMANDS)
            found.append(
                Event(
                    kind,
                    pick=rng.randrange(8),
                    partition=rng.randrange(partitions),
                    strategy=rng.choice(STRATEGIES),
                    wait=rng.random() < 0.3,
                )
            )
        else:
            kind = rng.choice(FAULTS)
            fault = rng.choice(LINK_FAULTS) if kind.endswith("-link") else ""
            found.append(Event(kind, pick=rng.randrange(8), fault=fault))
    return found


def write_replay(path: Path, seed: int, events: list[Event]) -> None:
    """Write the schedule to `path`, for `statestore faults --replay`."""
    path.write_text(json.dumps({"seed": seed, "events": [asdict(e) for e in events]}, indent=1))


def read_replay(path: Path) -> tuple[int, list[Event]]:
    """The seed and events of a schedule file; ValueError naming the file and what is wrong."""
    try:
        data = json.loads(path.read_text())
        return int(data["seed"]), [Event(**event) for event in data["events"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a schedule written by `statestore faults --schedule random` ({exc})") from exc
