"""Hand-over: a planned move of a task partition's primary from executor A to executor B, at the cost of one
increment (DESIGN.md section 4, "Hand-over"; seed 002 section 3.4, mapped to micro-batches).

The protocol's steps, in the seed's order (`HandOver.advance` takes them one after another):

1. **Decide** the move of partition p from A's node to B's node, and p's replica group once it is done (an
   operator command: `handover.migration`).
2. **Warm up** B: p's group is held to its old and new members together, so A ships to B (a bootstrap when B
   holds nothing, then every increment) and no old replica is dropped before the new ones are caught up. B
   joins when its lag is at most `acceptable_lag` versions (Kafka Streams' `acceptable.recovery.lag`).
3. **Fix the batch and steer**: p's task for the next micro-batch Spark plans, b*, is steered to B's executor
   (Spark's `StateStoreCoordinator`). Every move of one strategy batch is steered at once, so they share b*,
   and only once B's executor has opened its copy of p ahead of the move (B's node reports it), so that b*'s
   load only catches that copy up; an executor that opens no copies ahead, or one that has not within
   `open_ahead_wait`, is steered to anyway.
   If Spark runs p elsewhere anyway (its locality wait expired: the coordinator places p on another executor
   again), the move is steered again for the next batch, up to `max_attempts`; correctness never depends on
   it, since any executor loads p from the checkpoint location's history.
4. **A's last increment** (version b*) reaches B: shipped by A's node at A's commit, or pulled from the
   checkpoint location, where it is durable before batch b* starts, by B's provider.
5. **Materialize and promote**: B's provider loads b* from its node's replica (`StateLoader` in the provider)
   and B's node becomes p's primary (`PROMOTE`); the load reports where its state came from.
6. **Merge and settle**: B's provider merges the writes batch b* made before the increment was applied
   (partial state, the provider's `PendingIncrement`); A's copy settles: A adopts its unloaded store as a
   replica when p's new group keeps it (`DEMOTE`), else it drops it (the plan retires it). If B is lost after
   its promotion, or another node became p's primary since (a failover, a later move), A's copy is left as it
   is and the move ends: the failover path owns p now.

Without a primary move (only p's replicas change: a drain, a rebalance), steps 3 to 5 are skipped.

An *urgent* move (its source is leaving: Spark is decommissioning A's executor, which runs no new task and exits
about a second after its last one) waits in step 2 only for B, a replica holder already: the group's new
replicas warm up after the promotion, as after a failover, instead of keeping p on an executor that is going.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from handover.failover import LocateFunction, Steer, SteerFunction, freshest_holder
from placement import ReplicaGroup
from statestore.cluster.membership import Membership, NodeRecord, PartitionRecord
from statestore.logs import log_event
from statestore.rpc import control_pb2

_log = logging.getLogger("statestore.controller.handover")


class Step(str, Enum):
    """Where a hand-over is (the protocol's steps, then its end)."""

    def __str__(self) -> str:  # as enum.StrEnum (Python 3.11+) prints: the value
        return self.value

    DECIDED = "decided"
    WARMING_UP = "warming up"
    WARM = "warm"
    STEERED = "steered"
    PROMOTED = "promoted"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True)
class HandOverSettings:
    """Bounds of the protocol's waits (seconds) and of its retries."""

    acceptable_lag: int = 1  # versions a warm replica may lack (its provider reads them from the checkpoint)
    max_attempts: int = 5  # times a move is steered before it is reported as failed
    warm_up_timeout: float = 600.0
    promote_timeout: float = 300.0  # a move waits this long for Spark to run a batch of its partition
    settle_timeout: float = 180.0  # A's provider unloads at its executor's next task or maintenance
    open_ahead_wait: float = 3.0  # a warm move waits this long for B's executor to open its copy ahead of it
    place_wait: float = 60.0  # a warm move waits this long for Spark's run id of its partition (a restarted node)


@dataclass(frozen=True)
class SparkLevers:
    """What the driver lends the controller: steer a partition's next task, and read where Spark places it."""

    steer: SteerFunction
    locate: LocateFunction


@dataclass
class HandOver:
    """One task partition's move (or, with `source == target`, a change of its replicas only)."""

    task: str
    source: str  # A: the node p's primary runs on now
    target: str  # B
    final: ReplicaGroup  # p's group once done: primary B first
    target_executor: str = ""
    urgent: bool = False  # the source is leaving: only B must be warm before the steer
    batch: int = 0
    step: Step = Step.DECIDED
    attempts: int = 0
    steered_at_version: int = 0
    resteered_at: int = 0  # the newest version committed elsewhere when the move was last steered
    effective_version: int = 0
    load_source: str = ""
    loaded_from_version: int = 0
    load_millis: int = 0
    started_at: float = 0.0
    promoted_at: float = 0.0
    ended_at: float = 0.0
    source_after: str = ""
    opened_ahead: str = ""  # before the steer: "open" (B's executor opened its copy ahead), "late" or "no" (not)
    error: str = ""
    log: list[str] = field(default_factory=list)
    waiting_for: str = ""  # what an unfinished move waits for now (statestore status)
    _step_since: float = 0.0
    # Members of the group afterwards that died during the warm-up: not waited for.
    passed_over: set[str] = field(default_factory=set)
    _generations: dict[str, int] = field(default_factory=dict)  # node -> its generation when the move was decided

    @property
    def moves_primary(self) -> bool:
        """Whether the primary moves (else only the replicas change)."""
        return self.source != self.target

    @property
    def finished(self) -> bool:
        """Done or failed."""
        return self.step in (Step.DONE, Step.FAILED)

    @property
    def served(self) -> bool:
        """Past the steps that need Spark (promoted, or nothing to promote), or finished."""
        return self.finished or self.step is Step.PROMOTED


class HandOverProtocol:
    """Takes hand-overs through their steps against the controller's membership and replica groups."""

    def __init__(
        self,
        membership: Membership,
        groups: object,  # statestore.controller.replica_groups.ReplicaGroups (hold, release, adopt)
        levers: SparkLevers,
        settings: HandOverSettings,
        clock: Callable[[], float],
        origin: float,
    ) -> None:
        self._membership = membership
        self._groups = groups
        self._levers = levers
        self.settings = settings
        self._clock = clock
        self._origin = origin

    # 1. decide
    def decide(self, move: HandOver) -> None:
        """Record the decision (the caller chose source, target and final group). A move that another thread ended
        before (Spark decommissioned its target as the operation started) is left ended, holding nothing."""
        if move.finished:
            return
        move.started_at = self._clock()
        for node_id in (move.source, move.target):
            record = self._membership.node(node_id)
            move._generations[node_id] = record.generation if record is not None else 0
        what = (
            f"move the primary from node {move.source} to node {move.target}"
            if move.moves_primary
            else f"replicas of primary {move.source} change"
        )
        self._record(move, Step.DECIDED, f"{what}; group afterwards {', '.join(move.final.nodes)}")
        kept = self._replicas_now(move)
        if kept and self._groups.held(move.task) is None:
            # Until its warm-up starts (a later strategy batch, or a drain that just took its node out of every
            # plan), the partition keeps the replicas it has: a re-plan would retire them before the new ones
            # caught up, and a loss meanwhile would find no warm copy.
            self._groups.hold(move.task, (move.source, *kept))

    def _replicas_now(self, move: HandOver) -> list[str]:
        """The live nodes holding a replica of `move`'s partition that its primary ships to or the plan in force
        gives a role (not a stale copy on its way out)."""
        kept: dict[str, None] = {}
        for partition in self._stores(move.task):
            shipped_to = {r.node_id for r in partition.report.replicas}
            for record, _ in self._membership.holders(partition.key):
                node_id = record.node_id
                if node_id != move.source and (
                    node_id in shipped_to or self._groups.has_role(partition.key, node_id) is True
                ):
                    kept[node_id] = None
        return list(kept)

    def advance(self, move: HandOver, may_steer: bool) -> None:
        """Take `move` as far as it can go now; `may_steer` says whether its strategy batch is ready to steer."""
        if move.finished:
            return
        stores = self._stores(move.task)
        try:
            if move.step is Step.DECIDED:
                self._warm_up(move, stores)
            elif move.step is Step.WARMING_UP:
                self._check_warm(move, stores)
            elif move.step is Step.WARM and may_steer:
                self._steer(move, stores)
            elif move.step is Step.WARM:
                move.waiting_for = "the other moves of its batch to be warm (the strategy steers them together)"
            elif move.step is Step.STEERED:
                self._await_promotion(move, stores)
            elif move.step is Step.PROMOTED:
                self._settle(move, stores)
        except _Failed as failed:
            self.fail(move, str(failed))
        if move.finished:
            move.waiting_for = ""

    def fail(self, move: HandOver, why: str) -> None:
        """End `move` as failed: its group is no longer held, and `why` is recorded. A move that had steered Spark
        to a target now gone (lost, or being decommissioned) steers the partition back where it can run warm."""
        steered = move.step is Step.STEERED and move.moves_primary
        self._groups.release(move.task)
        move.error = why
        move.ended_at = self._clock()
        self._record(move, Step.FAILED, why, logging.WARNING)
        if steered:
            self._steer_back(move)

    def _steer_back(self, move: HandOver) -> None:
        """After a steered move failed because its target B cannot run the partition: steer the partition's next
        task to its primary A if A is alive, else to its freshest replica holder other than B. A failover of A's
        executor left the partition to this move, and none follows for B, whose node was never its primary."""
        target = self._membership.node(move.target)
        if target is not None and self._membership.is_alive(target) and move.target not in self._groups.draining():
            return  # B can still run it; where Spark runs it is Spark's choice
        stores = self._stores(move.task)
        if not stores:
            return
        primary = self._membership.node(stores[0].primary)
        if primary is not None and self._membership.is_alive(primary) and primary.node_id != move.target:
            chosen: NodeRecord | None = primary
        else:
            found = freshest_holder(self._membership, move.task, stores, exclude=frozenset({move.target}))
            chosen = found[0] if found is not None else None
        if chosen is None or not (chosen.executor_id and chosen.executor_host):
            log_event(_log, "not_steered_back", logging.WARNING, task=move.task, target=move.target,
                      why="no live node with an executor holds the partition")  # fmt: skip
            return
        for decision in self._decisions([(s, s.report) for s in stores], chosen):
            try:
                self._levers.steer(decision)
            except Exception as exc:  # steering is an optimisation: Spark still runs the task somewhere
                log_event(_log, "steer_failed", logging.WARNING, task=move.task, error=repr(exc))
                return
        self._record(move, Step.FAILED, f"steered back to executor {chosen.executor_id} (node {chosen.node_id})")

    # 2. warm up
    def _warm_up(self, move: HandOver, stores: list[PartitionRecord]) -> None:
        if not stores:
            raise _Failed(f"partition {move.task} is no longer reported by any node (its query stopped?)")
        current = self._groups.held(move.task) or ()
        members = [move.source, *[n for n in current if n != move.source]]
        members += [n for n in move.final.nodes if n not in members]
        self._groups.hold(move.task, tuple(members))
        self._record(move, Step.WARMING_UP, f"group held to {', '.join(members)} until the move is done")
        self._check_warm(move, stores)

    def _check_warm(self, move: HandOver, stores: list[PartitionRecord]) -> None:
        self._require_alive(move)
        behind = self._lagging(move, stores)
        if not behind:
            self._record(move, Step.WARM, f"every new member within {self.settings.acceptable_lag} version(s)")
            return
        lagging = [text for _, text in behind]
        move.waiting_for = (
            f"{', '.join(lagging)} to catch up; {self._left(move, self.settings.warm_up_timeout)} s left"
        )
        if self._clock() - move._step_since > self.settings.warm_up_timeout:
            nodes = sorted({node_id for node_id, _ in behind})
            who = ", ".join(
                f"node {n} ({'the target' if n == move.target else 'a replica of the group afterwards'})" for n in nodes
            )
            raise _Failed(
                f"warm-up of {', '.join(lagging)} did not catch up within {self.settings.warm_up_timeout:g}s: "
                f"{who} cannot become a replica in time (is its state node bootstrapping? see `statestore status`)"
            )

    def _lagging(self, move: HandOver, stores: list[PartitionRecord]) -> list[tuple[str, str]]:
        """(node id, description) of each store of the new members (not the current primary) whose replicas are
        more than the acceptable lag behind (of an urgent move: B only). A member other than B that died is not
        waited for: it cannot catch up, and the re-replication that follows its loss replaces it in the group (B's
        loss fails the move)."""
        behind = []
        members = ([move.target] if move.moves_primary else []) if move.urgent else move.final.nodes
        for node_id in members:
            if node_id == move.source:
                continue
            record = self._membership.node(node_id)
            if node_id != move.target and (record is None or not self._membership.is_alive(record)):
                if node_id not in move.passed_over:
                    move.passed_over.add(node_id)
                    why = f"node {node_id} of the group afterwards is lost: not waited for (re-replication replaces it)"
                    self._record(move, move.step, why)
                continue
            held = record.replicas_held if record is not None else {}
            for store in stores:
                if held.get(store.key, -1) < store.report.version - self.settings.acceptable_lag:
                    behind.append((
                        node_id,
                        f"node {node_id} ({store.store.store_id} at {held.get(store.key, 'none')} of "
                        f"{store.report.version})",
                    ))
        return behind

    # 3. fix the batch and steer
    def opened_ahead(self, move: HandOver) -> bool:
        """Whether `move`, warm, may be steered as far as B's copy goes: B's executor opened its copy of p ahead of
        the move, or it opens none, or `open_ahead_wait` ran out (an urgent move and a move of replicas only never
        wait)."""
        if move.step is not Step.WARM or not move.moves_primary or move.urgent or move.opened_ahead:
            return True
        target = self._membership.node(move.target)
        if target is None or not target.opens_ahead:
            move.opened_ahead = "no"
            return True
        missing = [s.store.store_id for s in self._stores(move.task) if s.key not in target.opened_ahead]
        if not missing:
            move.opened_ahead = "open"
            self._record(move, Step.WARM, f"executor {target.executor_id} opened its copy ahead of the move")
            return True
        waited = self._clock() - move._step_since
        if waited <= self.settings.open_ahead_wait:
            move.waiting_for = (
                f"executor {target.executor_id} to open its copy of {', '.join(missing)} ahead of the move; "
                f"{self._left(move, self.settings.open_ahead_wait)} s left"
            )
            return False
        move.opened_ahead = "late"
        self._record(
            move,
            Step.WARM,
            f"executor {target.executor_id} did not open its copy of {', '.join(missing)} within "
            f"{self.settings.open_ahead_wait:g}s: steered without it (its load asks the node then)",
            logging.WARNING,
        )
        return True

    def _steer(self, move: HandOver, stores: list[PartitionRecord]) -> None:
        if not move.moves_primary:
            self._adopt_final(move)
            self._record(move, Step.PROMOTED, "no primary move: the new group is in force")
            return
        self._require_alive(move)
        target = self._membership.node(move.target)
        assert target is not None  # _require_alive checked it
        behind = [text for node_id, text in self._lagging(move, stores) if node_id == move.target]
        if behind:
            # Warm when checked, maybe long ago (a batch's other moves, the open-ahead wait): B's node may have lost
            # its copy since (restarted at the same address). Steering now would load cold.
            self._record(move, Step.WARMING_UP, f"{', '.join(behind)} fell behind before the steer: warming up again")
            return
        if not stores:
            raise _Failed(
                f"partition {move.task} is no longer reported by any node (its query stopped, or its primary "
                "unloaded it and no batch ran since): nothing to steer; move it again once it runs"
            )
        # The reports as they are now: a heartbeat may replace a record's report meanwhile (a node restarted reports
        # its partitions without Spark's run id), and the decisions must rest on the reports checked here.
        reports = [(store, store.report) for store in stores]
        unplaced = [s.store.store_id for s, report in reports if not (report.place.run_id and report.place.state_root)]
        if unplaced:
            # A node restarted since the partition's last commit has not heard Spark's run id yet: its provider
            # tells it at the partition's next commit.
            move.waiting_for = (
                f"Spark's run id and state root of {', '.join(unplaced)} (the node learns them at the partition's "
                f"next commit); {self._left(move, self.settings.place_wait)} s left"
            )
            if self._clock() - move._step_since > self.settings.place_wait:
                raise _Failed(
                    f"{', '.join(unplaced)}: Spark's run id and state root not known within "
                    f"{self.settings.place_wait:g}s (no batch committed the partition since its node restarted)"
                )
            return
        move.attempts += 1
        move.steered_at_version = min(report.version for _, report in reports)
        move.resteered_at = max(report.version for _, report in reports)
        for decision in self._decisions(reports, target):
            self._levers.steer(decision)
        self._record(
            move,
            Step.STEERED,
            f"attempt {move.attempts}: the next batch (b* > {move.steered_at_version - 1}) steered to executor "
            f"{target.executor_id}",
        )

    def _decisions(
        self, reports: list[tuple[PartitionRecord, control_pb2.PrimaryReport]], target: NodeRecord
    ) -> list[Steer]:
        """One steer per store of the task partition, from the reports given; a store whose report lacks Spark's
        run id (its node restarted since its last commit) is left out: its next commit tells it."""
        decisions = []
        for store, report in reports:
            if not (report.place.run_id and report.place.state_root):
                continue
            held = target.replicas_held.get(store.key, 0)
            decisions.append(
                Steer(
                    store.store,
                    report.place.run_id,
                    report.place.state_root,
                    target.executor_id,
                    target.executor_host,
                    target.node_id,
                    held,
                    report.version,
                    "",
                )
            )
        return decisions

    # 4 and 5. the last increment reaches B, B materializes and promotes
    def _await_promotion(self, move: HandOver, stores: list[PartitionRecord]) -> None:
        self._require_alive(move)
        target = self._membership.node(move.target)
        assert target is not None
        if not stores:
            # No node claims the partition: its old primary unloaded it (Spark's maintenance follows the steer) and
            # no batch ran since, long enough for the controller to forget it. B's load claims it again.
            move.waiting_for = (
                f"Spark to run a batch of the partition on executor {target.executor_id} (no node claims it since "
                f"its old primary unloaded it); {self._left(move, self.settings.promote_timeout)} s left"
            )
            if self._clock() - move._step_since > self.settings.promote_timeout:
                raise _Failed(f"no batch ran the partition within {self.settings.promote_timeout:g}s of steering")
            return
        if all(store.primary == move.target and store.report.version >= move.steered_at_version for store in stores):
            load = stores[0].report.last_load
            move.effective_version = load.version or stores[0].report.version
            move.load_source = load.source
            move.loaded_from_version = load.from_version
            move.load_millis = load.millis
            move.promoted_at = self._clock()
            shipped = (
                "shipped at A's commit"
                if load.from_version >= load.version
                else (f"increments {load.from_version + 1}..{load.version} pulled from the checkpoint location")
            )
            self._record(move, Step.STEERED, f"4. last increment {move.effective_version} reached B: {shipped}")
            self._record(
                move,
                Step.PROMOTED,
                f"5. B loaded version {move.effective_version} from its {load.source or 'unknown source'} "
                f"(copy at {load.from_version}) in {load.millis} ms and is primary",
                logging.INFO if load.source in ("replica", "local") else logging.WARNING,
            )
            self._adopt_final(move)
            return
        committed = max((s.report.version for s in stores if s.primary != move.target), default=0)
        # Spark's coordinator is asked (through the driver's JVM) only once a batch committed elsewhere since
        # the last steer: not every tick.
        elsewhere = self._missed(move, stores, target) if committed > move.resteered_at else ""
        if elsewhere:
            # A task that loaded p after the steer re-reported its own executor. The batch in flight when the move
            # was steered may do so (its tasks were placed before) and commits steered_at_version + 1; every later
            # version committed elsewhere is a batch Spark ran elsewhere anyway: a missed batch. Steering again
            # waits for a commit, so that it lands between batches, not under a running task's stores.
            missed = max(0, committed - move.steered_at_version - 1)
            if missed >= self.settings.max_attempts:
                raise _Failed(
                    f"Spark ran the partition on {elsewhere} instead of executor {target.executor_id} in "
                    f"{missed} batch(es) (its locality wait expired?); the partition stays where it runs"
                )
            move.attempts = missed + 1
            move.resteered_at = committed
            self._record(
                move,
                Step.STEERED,
                f"Spark ran version {committed} on {elsewhere}: steered again for the next batch "
                f"(attempt {move.attempts})",
                logging.WARNING if missed else logging.INFO,
            )
            for decision in self._decisions([(s, s.report) for s in stores], target):
                self._levers.steer(decision)
            return
        move.waiting_for = (
            f"Spark to run a batch of the partition on executor {target.executor_id} (attempt {move.attempts}); "
            f"{self._left(move, self.settings.promote_timeout)} s left"
        )
        if self._clock() - move._step_since > self.settings.promote_timeout:
            idle = min(store.report.seconds_since_commit for store in stores)
            raise _Failed(
                f"no batch ran the partition within {self.settings.promote_timeout:g}s of steering (its last commit "
                f"was {idle:.0f}s ago: an idle query, or one whose trigger interval is longer, runs it at its next "
                f"batch, still steered to executor {target.executor_id})"
            )

    def _missed(self, move: HandOver, stores: list[PartitionRecord], target: NodeRecord) -> str:
        """Where Spark placed the partition instead of B since the steer ("" when nowhere else)."""
        for decision in self._decisions([(s, s.report) for s in stores], target):
            try:
                location = self._levers.locate(decision)
            except Exception as exc:  # the driver is stopping: the promote timeout ends the move
                log_event(_log, "locate_failed", logging.WARNING, task=move.task, error=repr(exc))
                return ""
            if location and location != decision.location:
                return location
        return ""

    # 6. merge and settle
    def _adopt_final(self, move: HandOver) -> None:
        """The final group becomes the plan in force (old members outside it are retired)."""
        self._groups.adopt({move.task: move.final})
        self._groups.release(move.task)

    def _settle(self, move: HandOver, stores: list[PartitionRecord]) -> None:
        source = self._membership.node(move.source)
        keys = [store.key for store in stores]
        # As the plan in force says now: a re-plan after the primary moved may keep A after all.
        keeps = all(self._groups.has_role(key, move.source) for key in keys)
        target = self._membership.node(move.final.primary)
        if source is None or not self._membership.is_alive(source):
            outcome = "its node is gone"
        elif move.moves_primary and (target is None or not self._membership.is_alive(target)):
            # B was lost after its promotion: the failover path owns the partition now, and A may well be its
            # primary again. Waiting for A to unload a copy Spark now uses would wait out settle_timeout.
            outcome = f"left as it is: the new primary's node {move.final.primary} was lost after the promotion"
        elif move.moves_primary and any(store.primary != move.final.primary for store in stores):
            outcome = "left as it is: the partition moved on since the promotion (a later move or a failover)"
        else:
            still_primary = any(key in source.primaries for key in keys)
            holds = all(key in source.replicas_held for key in keys)
            if not move.moves_primary:
                outcome = "replicas in place" if self._replicas_settled(move, keys) else ""
            elif not still_primary and holds == keeps:
                outcome = "replica" if keeps else "dropped"
            else:
                outcome = ""
        if not outcome and self._clock() - move._step_since <= self.settings.settle_timeout:
            move.waiting_for = (
                f"node {move.source}'s executor to unload its copy (at its next task or maintenance); "
                f"{self._left(move, self.settings.settle_timeout)} s left"
            )
            return
        move.source_after = outcome or "pending (Spark unloads A's copy at its next maintenance)"
        move.ended_at = self._clock()
        self._record(move, Step.DONE, f"6. A's copy: {move.source_after}")

    def _replicas_settled(self, move: HandOver, keys: list[str]) -> bool:
        """Whether every node outside the final group dropped its replica and every member holds one."""
        for record in self._membership.nodes():
            if not self._membership.is_alive(record) or record.node_id == move.final.primary:
                continue
            holds = all(key in record.replicas_held for key in keys)
            if holds != all(self._groups.has_role(key, record.node_id) for key in keys):
                return False
        return True

    def _require_alive(self, move: HandOver) -> None:
        """Fail the move at once when its target or (before the steer) its source is lost, or its state node
        restarted (its copies are gone): the reason names the executor and the step. A loss is known within the
        controller's `dead_after` (3 s by default), or at once when Spark reports the executor removed."""
        target = self._membership.node(move.target)
        if target is None or not self._membership.is_alive(target):
            raise _Failed(f"target {_executor(target, move.target)} lost at step {move.step}")
        if target.generation != move._generations.get(move.target, target.generation):
            raise _Failed(
                f"the state node of target {_executor(target, move.target)} restarted at step {move.step}: the "
                "copy it was given is gone (move it again)"
            )
        if move.moves_primary and not (target.executor_id and target.executor_host):
            raise _Failed(f"target node {move.target} has no known Spark executor to steer to")
        source = self._membership.node(move.source)
        if move.step is not Step.STEERED and (source is None or not self._membership.is_alive(source)):
            raise _Failed(f"source {_executor(source, move.source)} lost at step {move.step}: failover takes over")

    def _left(self, move: HandOver, limit: float) -> int:
        """Whole seconds left of `limit` in the move's current step."""
        return max(0, round(limit - (self._clock() - move._step_since)))

    def _stores(self, task: str) -> list[PartitionRecord]:
        return self._membership.stores_of_task(task)

    def _record(self, move: HandOver, step: Step, detail: str, level: int = logging.INFO) -> None:
        if move.finished and not (step is Step.DONE or step is Step.FAILED):
            return  # ended meanwhile (abandoned from another thread): a late step must not bring it back
        now = self._clock()
        if step is not move.step:
            move._step_since = now
        move.step = step
        move.log.append(f"{now - self._origin:.2f}s {step}: {detail}")
        log_event(
            _log,
            "handover_step",
            level,
            task=move.task,
            step=str(step),
            detail=detail,
            version=move.effective_version or move.steered_at_version,
        )


def _executor(record: NodeRecord | None, node_id: str) -> str:
    """`executor 2 (node 2)`, or `node 2` when its executor is not known."""
    executor = record.executor_id if record is not None else ""
    return f"executor {executor} (node {node_id})" if executor else f"node {node_id}"


class _Failed(Exception):
    """A hand-over cannot go on; the message says why."""
