"""The fault suite's hand-over and sync-mode scenarios.

**Hand-over**: each starts a move of partition 0 from its primary's executor A to an executor B that holds no
copy of it (so the move warms one up), waits until the move is at a step of the protocol (`handover.handover`),
and kills A or B (the executor JVM, or its state node) there:

- *warming up*: every link into the nodes is slowed (2 s per chunk) for the move's warm-up to last, then healed;
- *steered*: the move waits for Spark's next micro-batch, which the suite feeds only after the kill;
- *at B's promotion*: B's node is killed (or fails) as it promotes its copy (`promote` point), or B's executor
  right after its load (`load` point), in the steered batch;
- *promoted*: A's executor, once B is promoted by a micro-batch the suite feeds, while A's copy settles (A
  unloads it at its next maintenance, within 2 s: the kill may come just after).

Besides exact results, such a scenario passes only if its move ended within `OPERATION_BOUND_SECONDS` of the
last batch, done, or failed with a reason (`target executor 2 (node 2) lost at step steered`).

**Sync mode**: scenarios of the matrix run again with sync replication (a commit waits until one replica acked
its increment, at most the node's sync timeout), plus an executor killed right after its replica acked
(`acked` point): besides exact results, no commit may wait longer than `SYNC_BOUND_MS`.
"""

from __future__ import annotations

import dataclasses

from spark_provider.fault_suite.rig import Rig
from spark_provider.fault_suite.scenario import PARTITION, Inject, Scenario
from spark_provider.fault_suite.suite_query import SuiteQuery

# How long after the scenario's last batch its move may still run: the loss of A or B is known within the
# controller's dead_after (3 s) or at Spark's executor-removal event, and the move then fails at the next tick.
OPERATION_BOUND_SECONDS = 30.0
# A sync commit waits at most the node's sync timeout (10 s) for a replica's ack; 2 s of margin.
SYNC_BOUND_MS = 12_000
WARM_UP_DELAY = "delay 2000"


def _move_then_kill(
    steps: tuple[str, ...], victim: str, process: str, arm: str = "", slow_links: bool = False
) -> Inject:
    """Move partition 0 to an executor holding no copy of it; once the move is at one of `steps` (none: at once),
    arm `arm` (if any) and kill the `victim` ("source" or "target") `process` ("executor", "node" or "" for
    none: the armed point does it)."""

    def inject(rig: Rig, query: SuiteQuery) -> None:
        source = rig.primary_of(query, PARTITION)
        target = rig.target_for(query, PARTITION)
        if slow_links:
            rig.set_links(WARM_UP_DELAY)
        operation = rig.move(query, PARTITION, target)
        if steps:
            # Past the steer, Spark's batch promotes B: the suite feeds it.
            feeding = query if "promoted" in steps else None
            reached = rig.wait_step(operation, steps, query=feeding)
            if reached not in steps:
                raise RuntimeError(f"the move of partition {PARTITION} to {target} ended before {steps}")
        if arm:
            rig.arm(arm)
        who = source if victim == "source" else target
        if process == "executor":
            rig.kill_executor(who)
        elif process == "node":
            rig.kill_node(who)

    return inject


def _heal_links(rig: Rig) -> None:
    rig.set_links("pass")


def matrix() -> list[Scenario]:
    """The hand-over scenarios."""
    found = []
    for victim, process in (("source", "executor"), ("target", "executor"), ("target", "node")):
        found.append(
            Scenario(
                f"handover-kill-{victim}{'-node' if process == 'node' else ''}-at-warm-up",
                "kill -9 during a move",
                f"{process} of the move's {victim}, warming up",
                _move_then_kill(("warming up",), victim, process, slow_links=True),
                heal=_heal_links,
                heal_after=4,
            )
        )
    for victim, process in (("source", "executor"), ("target", "executor"), ("source", "node"), ("target", "node")):
        found.append(
            Scenario(
                f"handover-kill-{victim}{'-node' if process == 'node' else ''}-at-steer",
                "kill -9 during a move",
                f"{process} of the move's {victim}, steered (before the batch that promotes)",
                _move_then_kill(("steered",), victim, process),
            )
        )
    for action in ("kill", "raise"):
        found.append(
            Scenario(
                f"handover-node-{action}-at-promote",
                "kill -9 during a move" if action == "kill" else "error during a move",
                "the move's target node at promote",
                _move_then_kill(("steered",), "target", "", arm=f"promote {action} {PARTITION}"),
                armed=True,
            )
        )
    found += [
        Scenario(
            "handover-kill-target-at-load",
            "kill -9 during a move",
            "the move's target executor JVM right after its load (promoted)",
            _move_then_kill(("steered",), "target", "", arm=f"load kill {PARTITION}"),
            armed=True,
        ),
        Scenario(
            "handover-kill-source-at-promoted",
            "kill -9 during a move",
            "executor of the move's source once B is promoted (A's copy settling)",
            _move_then_kill(("promoted",), "source", "executor"),
        ),
    ]
    return found


# Scenarios of the base matrix run again in sync mode.
SYNC_OF = (
    "executor-kill-at-commit",
    "executor-kill-between-batches",
    "node-kill-at-apply",
    "node-pause-at-apply",
    "node-kill-replica",
    "replication-link-cut",
    "replication-link-drop",
    "executor-and-replica-node",
    "handover-kill-target-at-steer",
)


def sync_matrix(base: list[Scenario]) -> list[Scenario]:
    """The sync-mode scenarios: those of `base` (and the hand-over ones) named in SYNC_OF, and an executor
    killed right after its replica acked its commit."""
    by_name = {s.name: s for s in [*base, *matrix()]}
    found = [
        Scenario(
            "executor-kill-at-acked-sync",
            "kill -9",
            "executor JVM after its replica acked (Spark re-runs the batch: its load takes the replica back)",
            _arm_line(f"acked kill {PARTITION}"),
            armed=True,
            sync=True,
        )
    ]
    for name in SYNC_OF:
        scenario = by_name[name]
        found.append(dataclasses.replace(scenario, name=f"{name}-sync", where=f"{scenario.where} (sync)", sync=True))
    return found


def _arm_line(line: str) -> Inject:
    def inject(rig: Rig, query: SuiteQuery) -> None:
        rig.arm(line)

    return inject
