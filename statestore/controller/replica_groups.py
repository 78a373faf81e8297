"""Who replicates what: replica groups chosen by the placement package (docs/placement.md).

Placement works on Spark's task partitions: the stores one task loads (a stream-stream join's four per
partition) share one replica group, so that a failover finds all of them on the same node. Spark decides where
a partition's task runs, so each primary is pinned where its node reports it and placement chooses only the
replicas. `ReplicaGroups.choose_replica_group` is the one function the controller calls.

The plan follows events, not heartbeats. `Membership.changes` says in O(1) whether anything placement depends on
moved (a heartbeat that reports only new versions moves nothing), and `Membership.tasks_changed_since` which task
partitions did (their partitions appeared or went, or their primary changed node). When no node joined, only the
groups an event touched are re-placed (a *repair*: the groups of those task partitions whose primary moved or
that are new, and the groups with a role on a node lost or drained), by the same Hungarian solver on a problem of
those groups alone, the other groups' roles counted as load on their nodes. A node that joins, a change of the
replicas per partition, or a repair that finds no room re-plans every group, passing the plan in force as
`current`, so that only what must move moves and anything else only if it pays for its migration.

Re-replication waits: for `rereplication_delay` seconds after a node is lost, the plan in force stands
with the dead node's roles left empty (the failed-over partitions run on their promoted replicas, each
with one copy fewer) and no new replica is placed. Two reasons, both seen on a cluster losing an executor:
the copies a re-plan starts compete for CPU and disk with the very batch that resumes the failed-over
partitions, and Spark's replacement executor registers a few seconds after the loss, so a plan made at
once leaves it empty, every new replica lands on the survivors, which then hold every primary after the
next failover. HDFS waits the same way before re-replicating a lost datanode's blocks.

Operator commands (`handover.migration`) steer the plan three ways: `adopt` makes a target placement the plan
in force (later re-plans start from it); `hold` fixes a task partition's group while its hand-over runs (the
old and the new members together, so the new primary warms up as a replica and no old replica is dropped
before the new ones are caught up: make before break); `drain` keeps a node out of every plan from then on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

from placement import (
    CostBreakdown,
    InfeasiblePlacement,
    PartitionDemand,
    Placement,
    PlacementPlan,
    ReplicaGroup,
    plan_replica_groups,
)
from placement.bounds import lower_bound
from placement.build import build_problem
from placement.costs import CostModel
from statestore.cluster.membership import Membership, NodeRecord, PartitionRecord
from statestore.controller.placement_inputs import build_topology, demand_of, repair_topology
from statestore.logs import log_event
from statestore.partition_key import task_partition_key, task_partition_key_of

_log = logging.getLogger("statestore.controller.placement")
# Entries of the group change log kept at least (a reader further behind is answered "every task partition").
_GROUP_LOG_KEEP = 1 << 16


@dataclass(frozen=True)
class PlanInForce:
    """A plan of replica groups and what it was computed on."""

    placement: Placement | None  # keyed by task partition (statestore.partition_key.task_partition_key)
    pricing: Callable[[], tuple[CostBreakdown, float]] = field(compare=False, repr=False)  # (cost, lower bound)
    replicas: int = 0  # replicas per partition actually placed (fewer than q with too few live nodes)
    note: str = ""
    lost: frozenset[str] = frozenset()  # nodes whose roles stay empty while re-replication waits
    nodes: frozenset[str] = frozenset()  # the live nodes, neither draining nor lost, it was planned on
    repaired: int = 0  # groups the repair that made it re-placed (0: a whole re-plan, or nothing to place)

    @cached_property
    def _priced(self) -> tuple[CostBreakdown, float]:
        return self.pricing()

    @property
    def cost(self) -> CostBreakdown:
        """What the placement costs (priced when first asked: a repair does not price every group)."""
        return self._priced[0]

    @property
    def lower_bound(self) -> float:
        """A cost no placement of the same problem can beat."""
        return self._priced[1]

    @cached_property
    def tasks_by_node(self) -> dict[str, set[str]]:
        """Node id -> the task partitions whose group gives it a role."""
        by_node: dict[str, set[str]] = {}
        for task, group in (self.placement or {}).items():
            for node in group.nodes:
                by_node.setdefault(node, set()).add(task)
        return by_node


def _unpriced() -> tuple[CostBreakdown, float]:
    return CostBreakdown(0.0, 0.0, 0.0), 0.0


def _priced(cost: CostBreakdown, bound: float) -> Callable[[], tuple[CostBreakdown, float]]:
    return lambda: (cost, bound)


_EMPTY = PlanInForce(None, _unpriced)


class ReplicaGroups:
    """Replica groups of every reported partition, re-planned when membership or partitions change."""

    def __init__(self, membership: Membership, q: int, rereplication_delay: float = 0.0) -> None:
        self._membership = membership
        self._q = max(q, 0)
        self._delay = max(rereplication_delay, 0.0)
        self._lock = threading.Lock()  # guards the plan's state below
        self._planning = threading.Lock()  # one re-plan at a time; heartbeats never wait for one
        self._plan = _EMPTY
        self._held: PlanInForce | None = None  # the plan in force less its dead nodes, while re-replication waits
        self._loss_seen_at: float | None = None
        self._holds: dict[str, tuple[str, ...]] = {}  # task partition -> nodes in force while its move runs
        self._draining: set[str] = set()
        self._checked: tuple = ()  # (membership changes, draining, q) the answer in force was last checked at
        self._answer: PlanInForce = _EMPTY  # the plan in force, or its held form while re-replication waits
        self._log_position = 0  # how far Membership.tasks_changed_since was read
        self._pending: set[str] = set()  # task partitions changed since the plan in force was made
        self._rescan = True  # the next plan must look at every task partition (nothing planned yet, log overrun)
        self.replans = 0  # plans computed, repairs included
        self.repairs = 0  # of which only the groups a change touched were re-placed
        self.last_replan_seconds = 0.0  # how long the last plan made took
        self.last_replan_groups = 0  # and how many groups it (re-)placed
        # Bumped whenever an answer of choose_replica_group or has_role may change (a new plan, a hold, a release,
        # an adoption): a caller that remembers what it last sent can skip the work while it stands still.
        self.generation = 0
        # The task partitions whose answers may have changed, in order (`groups_changed_since`); an entry of None
        # stands for every task partition (another number of replicas, lost nodes, a plan from nothing).
        self._group_log: list[str | None] = []
        self._group_log_start = 0

    def choose_replica_group(self, partition: str, primary: str, plan: PlanInForce | None = None) -> list[str]:
        """The replica nodes of `partition` (a partition key), whose primary is on `primary` (at most q, all
        distinct); `plan`: the plan in force to answer from (`current()`), when the caller asks of many."""
        plan = plan or self.current()
        task = task_partition_key_of(partition)
        held = self._holds.get(task)
        if held is not None:
            return [node for node in held if node != primary and node not in plan.lost]
        if plan.placement is None or task not in plan.placement:
            return []
        group = plan.placement[task]
        return [node for node in group.nodes if node != primary and node not in plan.lost][: plan.replicas]

    def groups_changed_since(self, position: int | None) -> tuple[set[str] | None, int, PlanInForce]:
        """The task partitions whose answers of choose_replica_group or has_role may have changed since log
        position `position` (None: maybe every one's, or the log no longer reaches that far back), the position
        now (`position` None: only that), and the plan in force as of that position (read together: answers
        computed from that plan are current up to the position returned). O(the entries since `position`)."""
        with self._lock:
            end = self._group_log_start + len(self._group_log)
            if position is None:
                return set(), end, self._answer
            if position < self._group_log_start:
                return None, end, self._answer
            changed: set[str] = set()
            for task in self._group_log[position - self._group_log_start :]:
                if task is None:
                    return None, end, self._answer
                changed.add(task)
            return changed, end, self._answer

    def _log_groups(self, tasks: Iterable[str | None]) -> None:
        """Note that these task partitions' answers may have changed (lock held), and bump the generation."""
        self._group_log.extend(tasks)
        if len(self._group_log) > 2 * _GROUP_LOG_KEEP:
            drop = len(self._group_log) - _GROUP_LOG_KEEP
            del self._group_log[:drop]
            self._group_log_start += drop
        self.generation += 1

    def _log_answer_change(self, old: PlanInForce, new: PlanInForce) -> None:
        """Log the task partitions whose group differs between the answers `old` and `new` (lock held)."""
        if old.placement is None or new.placement is None or (old.lost, old.replicas) != (new.lost, new.replicas):
            self._log_groups([None])
            return
        if old.placement is new.placement:
            self.generation += 1
            return
        before, after = old.placement, new.placement
        changed = [task for task, group in after.items() if before.get(task) != group]
        changed.extend(task for task in before if task not in after)
        self._log_groups(changed)

    def has_role(self, partition: str, node: str, plan: PlanInForce | None = None) -> bool | None:
        """Whether the plan in force gives `node` a role (primary or replica) in `partition`'s group; None
        when the plan does not place `partition` (no plan yet, or no live node)."""
        plan = plan or self.current()
        task = task_partition_key_of(partition)
        held = self._holds.get(task)
        if held is not None:
            return node in held and node not in plan.lost
        if plan.placement is None or task not in plan.placement:
            return None
        return node in plan.placement[task].nodes and node not in plan.lost

    def hold(self, task: str, nodes: tuple[str, ...]) -> None:
        """Fix task partition `task`'s group to `nodes` (primary or not) until `release(task)`."""
        with self._lock:
            self._holds[task] = tuple(nodes)
            self._log_groups([task])

    def release(self, task: str) -> None:
        """End `hold(task)`: the plan in force places the partition again."""
        with self._lock:
            if self._holds.pop(task, None) is not None:
                self._log_groups([task])

    def held(self, task: str) -> tuple[str, ...] | None:
        """The nodes `task` is held to, if it is."""
        return self._holds.get(task)

    def drain(self, node: str) -> None:
        """Keep `node` out of every plan from now on (its roles are placed elsewhere at the next re-plan)."""
        with self._lock:
            self._draining.add(node)

    @property
    def q(self) -> int:
        """The replication factor asked for (replicas per partition)."""
        return self._q

    def undrain(self, node: str) -> None:
        """Undo `drain` (a drain that was refused before it started)."""
        with self._lock:
            self._draining.discard(node)

    def draining(self) -> frozenset[str]:
        """The nodes being drained."""
        return frozenset(self._draining)

    def adopt(self, groups: Mapping[str, ReplicaGroup]) -> None:
        """Make `groups` (task partition -> group) the plan in force for those task partitions; re-plans
        start from it (and keep it unless moving pays)."""
        unusable = sorted(
            {n for group in groups.values() for n in group.nodes if n in self._draining or not self._alive(n)}
        )
        with self._lock:
            if self._plan.placement is None:
                return
            if unusable:
                # A member died (or began draining) while the hand-over ran, after re-replication had re-planned:
                # adopted as is, the group would name it until some other change came. The next plan starts anew.
                self._rescan = True
                self._checked = ()  # the answer in force is stale although no membership change says so
                log_event(_log, "adopted_group_replanned", nodes=unusable,
                          detail="a member is dead or draining: re-planned at the next heartbeat")  # fmt: skip
            merged = dict(self._plan.placement.items())
            for task, group in groups.items():
                if task in merged and len(group.replicas) == self._plan.placement.replicas:
                    merged[task] = group
            adopted = replace(self._plan, placement=Placement(merged))
            if self._answer is self._plan:
                self._answer = adopted
            elif self._held is not None:
                self._held = self._answer = replace(self._held, placement=adopted.placement)
            self._plan = adopted
            self._log_groups(groups)

    def _alive(self, node_id: str) -> bool:
        record = self._membership.node(node_id)
        return record is not None and self._membership.is_alive(record)

    def demands(self) -> dict[str, PartitionDemand]:
        """Each task partition's demand (its stores' state and increment bytes summed), by task partition."""
        partitions = self._membership.partitions()
        tasks = {p.key: task_partition_key(p.store) for p in partitions}
        return {d.id: d for d in self._task_demands(partitions, tasks)}

    def target(
        self,
        pins: Mapping[str, str] | None,
        exclude: frozenset[str] = frozenset(),
        running: dict[str, str] | None = None,
    ) -> tuple[Placement, dict[str, str]] | None:
        """A fresh placement of every task partition on the live nodes neither draining nor in `exclude`,
        starting from the plan in force, with primaries pinned by `pins` (task partition -> node; None: where
        they run now, except on the nodes left out). Returns it with the nodes the primaries run on now (`running`
        when the caller read them already to choose its pins: the moves are then judged against the same
        snapshot, not one a report changed since); None when there is nothing to place."""
        plan = self.current()
        out = self._draining | exclude
        live = [r for r in self._membership.nodes() if self._membership.is_alive(r) and r.node_id not in out]
        partitions = self._membership.partitions()
        if not live or not partitions or plan.placement is None:
            return None
        tasks = {p.key: task_partition_key(p.store) for p in partitions}
        if running is None:
            running = _task_pins(partitions, tasks, set(self._membership.live_node_ids()))
        placeable = {r.node_id for r in live}
        # A pin on a node left out (draining, excluded, dead) cannot hold: its partition is placed freely.
        pins = {t: n for t, n in (running if pins is None else pins).items() if n in placeable}
        q = min(self._q, len(live) - 1)
        demands = sorted(self.demands().values(), key=lambda d: d.id)
        current = plan.placement
        topology = build_topology(live, q + 1, pins, len(demands))
        try:
            placed = plan_replica_groups(topology, demands, q, current=current, pinned_primaries=pins)
        except InfeasiblePlacement as exc:
            log_event(_log, "placement_infeasible", logging.ERROR, error=str(exc))
            placed = self._fallback(live, demands, q, current, pins)
        return placed.placement, running

    def current(self, wait: bool = True) -> PlanInForce:
        """The plan for the membership as it is now, re-planned first if its inputs changed. O(nodes) when
        nothing changed. `wait=False` (a heartbeat): while another thread re-plans, the plan in force answers."""
        checked = self._stamp()
        if checked == self._checked and not self._rereplication_due():
            return self._answer
        if not self._planning.acquire(blocking=wait):
            return self._answer
        try:
            checked = self._stamp()
            if checked == self._checked and not self._rereplication_due():
                return self._answer
            answer = self._current()
            with self._lock:
                if answer is not self._answer:
                    self._log_answer_change(self._answer, answer)
                self._answer = answer
                self._checked = checked
            return answer
        finally:
            self._planning.release()

    def _stamp(self) -> tuple:
        """What the answer in force depends on besides time: membership's changes and the nodes draining."""
        self._membership.live_node_ids()  # brings liveness (and so `changes`) up to date
        return (self._membership.changes, frozenset(self._draining), self._q)

    def _rereplication_due(self) -> bool:
        """Whether re-replication has waited long enough since a loss (the held plan must be re-planned)."""
        return self._loss_seen_at is not None and self._membership.now() - self._loss_seen_at >= self._delay

    def _current(self) -> PlanInForce:
        """The plan for the membership as it is now (call with the planning lock held)."""
        changed, self._log_position = self._membership.tasks_changed_since(self._log_position)
        if changed is None:
            self._rescan = True
        else:
            self._pending |= changed
        records = self._membership.nodes()
        alive = {r.node_id for r in records if self._membership.is_alive(r)}
        if self._draining:  # nodes the membership dropped (dead past forget_after) are drained for good
            with self._lock:
                self._draining &= {r.node_id for r in records}
        live = [r for r in records if r.node_id in alive and r.node_id not in self._draining]
        live_ids = frozenset(r.node_id for r in live)
        with self._lock:
            plan = self._plan
            lost = set(plan.tasks_by_node) - alive  # a draining node is not lost
            if lost and self._waits_for_rereplication():
                return self._without(lost)
            self._loss_seen_at = None
            self._held = None
        q = min(self._q, len(live) - 1)
        started = time.perf_counter()
        if plan.placement is not None and not self._rescan and plan.replicas == q and live_ids <= plan.nodes:
            if not self._pending and live_ids == plan.nodes:
                return plan
            try:
                made = self._repair(plan, plan.placement, live, live_ids, q)
            except InfeasiblePlacement as exc:
                log_event(_log, "repair_failed", error=str(exc), note="every group is placed anew")
                made = self._replan(plan, live, live_ids, q)
        else:
            made = self._replan(plan, live, live_ids, q)
        self._pending.clear()
        self._rescan = made.placement is None
        if made is not plan:
            self.last_replan_seconds = time.perf_counter() - started
            self.last_replan_groups = made.repaired or len(made.placement or ())
        with self._lock:
            if self._plan is not plan:
                # A hand-over's groups were adopted while this plan was being made (the solver runs without the
                # lock): kept, and the next plan starts from them.
                self._rescan = True
                self._checked = ()
                return self._plan
            self._plan = made
        return made

    def _waits_for_rereplication(self) -> bool:
        """Whether a loss is recent enough that re-replication still waits (see the module docstring)."""
        if self._delay <= 0:
            return False
        now = self._membership.now()
        if self._loss_seen_at is None:
            self._loss_seen_at = now
            log_event(_log, "rereplication_waits", seconds=self._delay)
        return now - self._loss_seen_at < self._delay

    def _without(self, lost: set[str]) -> PlanInForce:
        """The plan in force with the `lost` nodes' roles left empty (cached while the same nodes are lost)."""
        if self._held is not None and self._held.lost == lost and self._held.placement is self._plan.placement:
            return self._held
        note = f"re-replication after the loss of {', '.join(sorted(lost))} waits {self._delay:g}s"
        self._held = replace(self._plan, note=note, lost=frozenset(lost))
        return self._held

    def _degraded(self, live: list[NodeRecord], q: int) -> str:
        """The note of a plan with fewer replicas than asked ("" when it has them all)."""
        if q >= self._q:
            return ""
        log_event(_log, "replicas_degraded", logging.WARNING, live=len(live), asked=self._q, placed=q)
        return f"only {len(live)} live node(s): {q} replica(s) per partition instead of {self._q}"

    def _replan(
        self, previous: PlanInForce, live: list[NodeRecord], live_ids: frozenset[str], q: int
    ) -> PlanInForce:
        """Every group placed anew around the previous plan (O(partitions) and the solver on all of them)."""
        partitions = self._membership.partitions()
        if not live or not partitions:
            return _EMPTY
        note = self._degraded(live, q)
        tasks = {p.key: task_partition_key(p.store) for p in partitions}
        pins = _task_pins(partitions, tasks, set(live_ids))
        demands = self._task_demands(partitions, tasks)
        # Whatever q it had: the solver keeps the copies that are still of use (a caught-up replica is worth keeping
        # when q grows or shrinks), where starting from nothing dropped a third of them.
        current = previous.placement
        topology = build_topology(live, q + 1, pins, len(demands))
        try:
            plan = plan_replica_groups(topology, demands, q, current=current, pinned_primaries=pins)
        except InfeasiblePlacement as exc:
            log_event(_log, "placement_infeasible", logging.ERROR, error=str(exc))
            try:
                plan = self._fallback(live, demands, q, current, pins)
            except InfeasiblePlacement as again:
                # Status and the nodes' assignments must keep working: the plan in force stays, and says why.
                log_event(_log, "placement_kept", logging.ERROR, error=str(again))
                return replace(previous, note=f"re-planning failed, the previous plan stays: {again}")
        self.replans += 1
        moved = sum(1 for m in plan.moves if m.target is not None and m.source is not None)
        log_event(
            _log,
            "replanned",
            nodes=len(live),
            partitions=len(demands),
            replicas=q,
            moves=len(plan.moves),
            copy_moves=moved,
            cost=plan.cost.total,
        )
        return PlanInForce(plan.placement, _priced(plan.cost, plan.lower_bound), q, note, nodes=live_ids)

    def _repair(
        self,
        previous: PlanInForce,
        current: Placement,
        live: list[NodeRecord],
        live_ids: frozenset[str],
        q: int,
    ) -> PlanInForce:
        """Re-place only the groups the changes since `previous` touched (module docstring): O(the changed task
        partitions, and the groups of nodes that left) plus the solver on the touched groups alone. Raises
        InfeasiblePlacement when the nodes' room left does not fit them."""
        stores: dict[str, list[PartitionRecord]] = {}
        pins: dict[str, str] = {}

        def look_up(task: str) -> bool:
            """Read `task`'s stores and pin; False when it has no store left."""
            if task not in stores:
                stores[task] = self._membership.stores_of_task(task)
                pin = _pin_of(stores[task], live_ids)  # as `_replan`: never on a draining node
                if pin is not None:
                    pins[task] = pin
            return bool(stores[task])

        touched: set[str] = set()
        removed: set[str] = set()
        for task in self._pending:
            if not look_up(task):
                removed.add(task)
                continue
            group = current.get(task)
            if group is None or pins.get(task, group.primary) != group.primary or not live_ids >= set(group.nodes):
                touched.add(task)
        for node in previous.tasks_by_node.keys() - live_ids:  # roles on nodes lost or draining
            for task in previous.tasks_by_node[node]:
                if task not in removed and look_up(task):
                    touched.add(task)
        if not touched and not removed:
            return replace(previous, nodes=live_ids)
        placed = {task: group for task, group in current.items() if task not in touched and task not in removed}
        if touched:
            demands = [_task_demand(task, stores[task], self._membership) for task in sorted(touched)]
            everyone = {task: group.primary for task, group in placed.items()} | pins
            topology = repair_topology(live, q + 1, everyone, len(placed) + len(touched), placed.values(), demands)
            plan = plan_replica_groups(
                topology,
                demands,
                q,
                current=Placement({task: current[task] for task in touched if task in current}),
                pinned_primaries={task: pins[task] for task in touched if task in pins},
                around=placed.values(),
            )
            placed.update(plan.placement.items())
        log_event(
            _log, "repaired", nodes=len(live), partitions=len(placed), replaced=len(touched), removed=len(removed)
        )
        self.replans += 1
        self.repairs += 1
        placement = Placement(placed)

        def pricing() -> tuple[CostBreakdown, float]:
            partitions = self._membership.partitions()
            tasks = {p.key: task_partition_key(p.store) for p in partitions}
            demands = [d for d in self._task_demands(partitions, tasks) if d.id in placement]
            return _price(live, q, _task_pins(partitions, tasks, set(live_ids)), demands, placement)

        return PlanInForce(
            placement, pricing, q, self._degraded(live, q), nodes=live_ids, repaired=len(touched)
        )

    def _task_demands(self, partitions: list[PartitionRecord], tasks: dict[str, str]) -> list[PartitionDemand]:
        """One demand per task partition of `partitions`: its stores' state and increment bytes summed."""
        demands = [demand_of(p, self._membership.state_bytes(p.key)) for p in partitions]
        return _task_demands(partitions, tasks, demands)

    @staticmethod
    def _fallback(live: list, demands: list, q: int, current: Placement | None, pins: dict[str, str]) -> PlacementPlan:
        """Capacities loosened to every partition on every node: feasible whenever q + 1 nodes are live."""
        topology = build_topology(live, len(demands) * len(live), pins, len(demands))
        return plan_replica_groups(topology, demands, q, current=current, pinned_primaries=pins)


def _price(
    live: list[NodeRecord], q: int, pins: dict[str, str], demands: list[PartitionDemand], placement: Placement
) -> tuple[CostBreakdown, float]:
    """What a repaired placement costs as it stands, and the bound no placement beats (for status); a placement
    the capacity rule no longer fits is priced on loosened capacities."""
    pins = {task: node for task, node in pins.items() if task in placement}
    for copies in (q + 1, len(demands) * len(live)):
        topology = build_topology(live, copies, pins, len(demands))
        try:
            problem = build_problem(topology, demands, q, CostModel(), placement, pins)
        except (InfeasiblePlacement, ValueError):
            continue
        if (problem.start >= 0).all():
            return problem.evaluate(problem.start), lower_bound(problem)
    return _unpriced()


def _pin_of(stores: list[PartitionRecord], live: set[str]) -> str | None:
    """A task partition's primary from its stores' records: where the most of them run, if live (ties to the
    lowest node id)."""
    count: dict[str, int] = {}
    for p in stores:
        if p.primary in live:
            count[p.primary] = count.get(p.primary, 0) + 1
    return min(count, key=lambda n: (-count[n], n)) if count else None


def _task_pins(partitions: list[PartitionRecord], tasks: dict[str, str], live: set[str]) -> dict[str, str]:
    """Each task partition's primary: where its stores' primaries are (the most of them, when a move is under
    way; ties to the lowest node id), if that node is live."""
    votes: dict[str, dict[str, int]] = {}
    for p in partitions:
        if p.primary in live:
            count = votes.setdefault(tasks[p.key], {})
            count[p.primary] = count.get(p.primary, 0) + 1
    return {
        task: next(iter(count)) if len(count) == 1 else min(count, key=lambda n: (-count[n], n))
        for task, count in votes.items()
    }


def _task_demand(task: str, stores: list[PartitionRecord], membership: Membership) -> PartitionDemand:
    """Task partition `task`'s demand: its stores' state and increment bytes summed."""
    demands = [demand_of(p, membership.state_bytes(p.key)) for p in stores]
    return PartitionDemand(task, sum(d.size_bytes for d in demands), sum(d.increment_bytes for d in demands))


def _task_demands(
    partitions: list[PartitionRecord], tasks: dict[str, str], demands: list[PartitionDemand]
) -> list[PartitionDemand]:
    """One demand per task partition: the sums of its stores' state and increment bytes."""
    sizes: dict[str, list[int]] = {}
    for p, demand in zip(partitions, demands, strict=True):
        total = sizes.setdefault(tasks[p.key], [0, 0])
        total[0] += demand.size_bytes
        total[1] += demand.increment_bytes
    return [PartitionDemand(task, size, increment) for task, (size, increment) in sorted(sizes.items())]
