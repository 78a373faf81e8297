"""Operator commands: `move`, `drain` and `rebalance` turned into hand-overs (handover.handover) and carried out
by a strategy (handover.migration). Resolves the names an operator types, plans the target groups, keeps the
operation running and the last ones done for `statestore status`.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import grpc

from handover.failover import freshest_holder
from handover.handover import HandOver, HandOverProtocol, HandOverSettings, SparkLevers
from handover.migration import Migration, order_moves
from placement import PartitionDemand, Placement, ReplicaGroup, Strategy
from placement.primaries import balance_primaries, balance_primaries_by_load, move_primaries_to_lighter_nodes
from statestore.cluster.membership import Membership, NodeRecord
from statestore.controller.replica_groups import ReplicaGroups
from statestore.logs import log_event
from statestore.partition_key import normalized_checkpoint_dir, task_partition_key, task_partition_key_of
from statestore.rpc import common_pb2, control_pb2

_KEPT = 8  # operations kept for status once done
_log = logging.getLogger("statestore.controller.operations")
_PARTITION_SPEC = re.compile(r"^(?:(?P<operator>\d+)/)?(?P<partition>\d+)(?:/(?P<store>.+))?$")


class OperationError(Exception):
    """A command refused: `code` is the gRPC status, the message says what is wrong and what would do."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class PartitionMoveRequest:
    """One `move`: task partition(s) named by `partition` (and `query`) to the executor `to_executor`."""

    partition: str
    to_executor: str
    query: str = ""


class Operations:
    """Runs one operator command at a time and remembers the last ones."""

    def __init__(self, membership: Membership, groups: ReplicaGroups, settings: HandOverSettings | None = None) -> None:
        self._membership = membership
        self._groups = groups
        self.settings = settings or HandOverSettings()
        self._levers: SparkLevers | None = None
        self._lock = threading.Lock()
        self._operations: list[Migration] = []
        self._next_id = 1

    def attach_spark(self, levers: SparkLevers) -> None:
        """The driver's steering levers (without them, moves are refused: nothing could steer Spark)."""
        self._levers = levers

    # commands
    def move(self, requests: Sequence[PartitionMoveRequest], strategy: str = "") -> control_pb2.OperationStatus:
        """Move each named task partition's primary to the named executor."""
        if not requests:
            raise OperationError(grpc.StatusCode.INVALID_ARGUMENT, "move: name at least one partition")
        plan = self._plan_in_force()
        running = self._running_primaries()
        moves, notes = [], []
        for request in requests:
            target = self.resolve_executor(request.to_executor, for_target=True)
            for task in self.resolve_partition(request.partition, request.query):
                source = running.get(task)
                if source is None:
                    raise OperationError(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        f"partition {task} has no live primary now (failover is under way?): retry once it runs",
                    )
                if source == target.node_id:
                    notes.append(f"{task}: already on executor {target.executor_id} (node {target.node_id})")
                    continue
                group = plan.get(task) if plan is not None else None
                members = list(group.nodes) if group is not None else [source]
                replicas = [n for n in members if n not in (source, target.node_id)]
                if target.node_id in members:
                    final = ReplicaGroup(target.node_id, (source, *replicas))  # A stays, as a replica
                else:
                    final = ReplicaGroup(target.node_id, tuple(replicas))  # A drops its copy
                moves.append(HandOver(task, source, target.node_id, final, target.executor_id))
        return self._start("move", strategy, moves, notes)

    def drain(self, executor: str, strategy: str = "") -> control_pb2.OperationStatus:
        """Move every primary and replica off `executor`."""
        record = self.resolve_executor(executor, for_target=False)
        if len(self._membership.live_node_ids()) - len(self._groups.draining() | {record.node_id}) < 1:
            raise OperationError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"cannot drain executor {executor}: no other live executor would be left to take its partitions",
            )
        target = self._groups.target(None, exclude=frozenset({record.node_id}))
        moves, notes = self._moves_to(target)
        was_draining = record.node_id in self._groups.draining()
        self._groups.drain(record.node_id)
        notes.append(f"node {record.node_id} is kept out of every plan from now on")
        try:
            return self._start("drain", strategy, moves, notes)
        except OperationError:
            # Refused (another operation runs, a bad strategy): the executor is not being drained after all, and
            # later moves to it must not be refused as if it were.
            if not was_draining:
                self._groups.undrain(record.node_id)
            raise

    def decommissioning(self, executor_id: str) -> int | None:
        """Spark is decommissioning `executor_id`: it runs no new task and exits about a second after its last
        one. Drain it at once, all at once: each primary goes to its freshest replica holder (urgent moves: only
        that holder must be warm, new replicas follow), its replicas to other nodes, and no plan uses its node
        again. Moves of a running operation to it fail. Returns the drain's operation id (0: the executor has no
        node, or nothing to drain), None while another operation is still running (call again)."""
        node_id = self._membership.node_of_executor(executor_id)
        record = self._membership.node(node_id) if node_id else None
        if record is None or not self._membership.is_alive(record):
            log_event(_log, "decommission_not_drained", executor=executor_id, why="no live state node")
            return 0
        self._groups.drain(record.node_id)
        with self._lock:
            running = [m for m in self._operations if m.running]
        for migration in running:
            if migration.kind == "decommission" and record.node_id in migration.draining:
                return migration.operation_id
            abandoned = migration.abandon_target(
                record.node_id, f"Spark is decommissioning executor {executor_id}: the move cannot end there"
            )
            if abandoned:
                log_event(_log, "moves_abandoned", operation=migration.operation_id, tasks=abandoned)
        if running:
            return None
        running_primaries = self._running_primaries()
        pins = {task: node for task, node in running_primaries.items() if node != record.node_id}
        left = frozenset({record.node_id})
        notes = [
            f"Spark is decommissioning executor {executor_id} (node {record.node_id}): it runs no new task and "
            "exits once idle, so its partitions are handed over at the next batch, all at once, each to its "
            "freshest replica holder; new replicas warm up after"
        ]
        for task, node in sorted(running_primaries.items()):
            if node != record.node_id:
                continue
            stores = self._membership.stores_of_task(task)
            holder = freshest_holder(self._membership, task, stores, exclude=left | self._groups.draining())
            if holder is None:
                notes.append(
                    f"{task}: no live replica holder: its new primary warms up first (if the executor is gone "
                    "before, the partition loads from the checkpoint location where Spark runs it)"
                )
                continue
            pins[task] = holder[0].node_id
        moves, more = self._moves_to(self._groups.target(pins, exclude=left))
        for move in moves:
            move.urgent = True
        try:
            status = self._start("decommission", Strategy.ALL_AT_ONCE, moves, [*notes, *more])
        except OperationError as exc:  # another operation started meanwhile
            log_event(_log, "decommission_deferred", executor=executor_id, why=str(exc))
            return None
        with self._lock:
            started = next(m for m in self._operations if m.operation_id == status.operation_id)
        started.draining.add(record.node_id)
        log_event(_log, "decommission_drain", executor=executor_id, node=record.node_id,
                  operation=status.operation_id, moves=len(moves))  # fmt: skip
        return status.operation_id

    def draining(self) -> frozenset[str]:
        """The nodes being drained (no plan places anything there)."""
        return self._groups.draining()

    def steered_from(self, node_id: str) -> frozenset[str]:
        """Task partitions a running operation has steered off `node_id` (failover leaves them to it)."""
        with self._lock:
            running = [m for m in self._operations if m.running]
        return frozenset(task for m in running for task in m.steered_from(node_id))

    def rebalance(self, strategy: str = "", dry_run: bool = False) -> control_pb2.OperationStatus:
        """Re-plan primaries and replicas (primaries not pinned) and carry out the moves."""
        target = self._groups.target({})
        if target is not None:
            placement, running = target
            fixed = frozenset(t for t in placement if t not in running)
            target = (balance_primaries(placement, fixed), running)
        moves, notes = self._moves_to(target)
        if not moves:
            notes.append("the placement in force is already balanced: nothing to move")
        return self._start("rebalance", strategy, moves, notes, dry_run)

    def balance_load(
        self,
        loads: Mapping[str, float],
        cores: Mapping[str, int],
        notes: list[str],
        max_moves: int,
        min_gain: float = 0.0,
        dry_run: bool = False,
    ) -> control_pb2.OperationStatus | None:
        """Hand primaries over so that the busiest executor's task time per core falls (`loads`: task partition
        -> milliseconds per batch; `cores`: every live executor's node, those holding nothing included), at most
        `max_moves`, with the batched strategy: role swaps inside the groups first, then moves to lighter
        executors outside them (warmed up first: a new executor takes replicas, then primaries). The
        load-balancing policy's operation (`notes` say why it was started). None, and nothing started, when the
        busiest load per core would fall by less than `min_gain` milliseconds."""
        target = self._groups.target(None)
        if target is None:
            return None
        placement, running = target
        fixed = frozenset(t for t in placement if t not in running)
        before = _busiest_per_core(placement, loads, cores)
        balanced, swapped = balance_primaries_by_load(placement, loads, cores, fixed, max_moves)
        # Then to executors outside the groups (one that joined holds nothing): a warm-up copy each.
        balanced, spread = move_primaries_to_lighter_nodes(
            balanced, loads, cores, fixed | frozenset(swapped), max_moves - len(swapped)
        )
        swapped = [*swapped, *spread]
        after = _busiest_per_core(balanced, loads, cores)
        if not swapped or _excess(placement, loads, cores) - _excess(balanced, loads, cores) < min_gain:
            return None
        moves, more = self._moves_to((balanced, running))
        moves = [m for m in moves if m.task in swapped]  # only the hand-overs it is for, nothing else re-planned
        for move in moves:
            if move.task in swapped:
                move.log.append(
                    f"load balancing: {loads.get(move.task, 0.0):.0f} ms per batch moves from node {move.source} "
                    f"to node {move.target}"
                )
        notes = [*notes, f"busiest executor's task time per core: {before:.0f} ms per batch, {after:.0f} ms after "
                 f"the moves", *more]  # fmt: skip
        return self._start("balance", Strategy.BATCHED, moves, notes, dry_run)

    @property
    def running(self) -> bool:
        """Whether an operation is being carried out now."""
        with self._lock:
            return any(m.running for m in self._operations)

    def status(self, operation_id: int = 0) -> control_pb2.OperationStatus:
        """Operation `operation_id`'s status (0: the last one)."""
        with self._lock:
            found = [m for m in self._operations if operation_id in (0, m.operation_id)]
        if not found:
            raise OperationError(
                grpc.StatusCode.NOT_FOUND,
                f"no operation {operation_id}" if operation_id else "no operation was started yet",
            )
        return found[-1].status()

    def recent(self) -> list[control_pb2.OperationStatus]:
        """The running operation and the last ones done, oldest first."""
        with self._lock:
            operations = list(self._operations)
        return [m.status() for m in operations]

    def incoming(self, node_id: str) -> list[common_pb2.StoreRef]:
        """The store partitions the running operation moves to `node_id` soon (its executor opens them ahead)."""
        with self._lock:
            running = [m for m in self._operations if m.running]
        tasks = {task for m in running for task in m.incoming(node_id)}
        if not tasks:
            return []
        return [p.store for task in sorted(tasks) for p in self._membership.stores_of_task(task)]

    def stop(self) -> None:
        """Stop the running operation's thread (the controller is stopping)."""
        with self._lock:
            for migration in self._operations:
                migration.stop()

    # names
    def resolve_executor(self, spec: str, for_target: bool) -> NodeRecord:
        """The live node of Spark executor `spec` (or node id `spec`); clear errors otherwise."""
        records = self._membership.nodes()
        found = [r for r in records if r.executor_id == spec] or [r for r in records if r.node_id == spec]
        known = ", ".join(f"{r.executor_id or '?'} (node {r.node_id})" for r in records) or "none"
        if not found:
            raise OperationError(grpc.StatusCode.NOT_FOUND, f"unknown executor {spec!r}: the controller knows {known}")
        record = found[0]
        if not self._membership.is_alive(record):
            raise OperationError(
                grpc.StatusCode.FAILED_PRECONDITION, f"executor {spec!r} (node {record.node_id}) is dead"
            )
        if for_target and record.node_id in self._groups.draining():
            raise OperationError(
                grpc.StatusCode.FAILED_PRECONDITION, f"executor {spec!r} (node {record.node_id}) is being drained"
            )
        if for_target and not (record.executor_id and record.executor_host):
            raise OperationError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"node {record.node_id} has no known Spark executor: Spark cannot be steered to it",
            )
        return record

    def resolve_partition(self, spec: str, query: str = "") -> list[str]:
        """The task partitions `spec` names (see control.proto, PartitionMove), in one query."""
        match = _PARTITION_SPEC.match(spec.strip())
        if match is None:
            raise OperationError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"partition {spec!r}: expected PARTITION, OPERATOR/PARTITION or OPERATOR/PARTITION/STORE",
            )
        tasks = sorted({task_partition_key(p.store) for p in self._membership.partitions()})
        wanted_root = normalized_checkpoint_dir(query) if query else ""
        found = []
        for task in tasks:
            ids, _, root = task.partition("@")
            operator, _, partition = ids.partition("/")
            if partition != match.group("partition"):
                continue
            if match.group("operator") is not None and operator != match.group("operator"):
                continue
            if wanted_root and root != wanted_root:
                continue
            found.append(task)
        if not found:
            raise OperationError(
                grpc.StatusCode.NOT_FOUND,
                f"unknown partition {spec!r}{f' in query {query}' if query else ''}: the controller knows "
                f"{', '.join(tasks) if tasks else 'no partition yet (has the query committed a batch?)'}",
            )
        roots = sorted({task.partition("@")[2] for task in found})
        if len(roots) > 1:
            raise OperationError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"partition {spec!r} is in several queries ({', '.join(roots)}): name one with --query",
            )
        return found

    # planning
    def _plan_in_force(self) -> Placement | None:
        return self._groups.current().placement

    def _running_primaries(self) -> dict[str, str]:
        """Task partition -> the live node its stores' primaries run on (the most of them)."""
        votes: dict[str, dict[str, int]] = {}
        live = set(self._membership.live_node_ids())
        for p in self._membership.partitions():
            if p.primary in live:
                count = votes.setdefault(task_partition_key(p.store), {})
                count[p.primary] = count.get(p.primary, 0) + 1
        return {task: max(sorted(count), key=lambda n: count[n]) for task, count in votes.items()}

    def _moves_to(self, target: tuple[Placement, dict[str, str]] | None) -> tuple[list[HandOver], list[str]]:
        """The hand-overs that turn the groups in force into `target`'s."""
        if target is None:
            return [], ["no partition is placed yet (has the query committed a batch?)"]
        placement, running = target
        plan = self._plan_in_force()
        executors = {r.node_id: r.executor_id for r in self._membership.nodes()}
        moves, notes = [], []
        for task, group in sorted(placement.items()):
            source = running.get(task)
            if source is None:
                notes.append(f"{task}: no live primary (failover is under way?): left as it is")
                continue
            before = set(plan[task].nodes) if plan is not None and task in plan else {source}
            if group.primary == source and set(group.nodes) == before:
                continue
            moves.append(HandOver(task, source, group.primary, group, executors.get(group.primary, "")))
        return moves, notes

    def _start(
        self, kind: str, strategy: str, moves: list[HandOver], notes: list[str], dry_run: bool = False
    ) -> control_pb2.OperationStatus:
        try:
            chosen = Strategy(strategy or Strategy.BATCHED)
        except ValueError:
            raise OperationError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"unknown strategy {strategy!r}: one of {', '.join(s.value for s in Strategy)}",
            ) from None
        if moves and not dry_run and self._levers is None:
            raise OperationError(
                grpc.StatusCode.FAILED_PRECONDITION,
                "this controller has no Spark driver to steer tasks with: moves need the controller the driver "
                "plugin starts beside the driver's JVM (spark.plugins=io.statestore.spark.StatestorePlugin, no "
                "controller setting)",
            )
        with self._lock:
            if any(m.running for m in self._operations):
                busy = next(m for m in self._operations if m.running)
                raise OperationError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"operation {busy.operation_id} ({busy.kind}) is still running: wait for it "
                    f"(statestore status) before starting another",
                )
            demands = self._groups.demands()
            primaries = Counter(self._running_primaries().values())
            order_moves(moves, chosen, lambda m: _move_bytes(m, demands, self._membership), primaries)
            protocol = HandOverProtocol(
                self._membership,
                self._groups,
                self._levers or SparkLevers(lambda _d: None, lambda _d: ""),
                self.settings,
                time.monotonic,
                time.monotonic(),
            )
            migration = Migration(self._next_id, kind, chosen, moves, protocol, notes, dry_run)
            self._next_id += 1
            self._operations = [*self._operations[-(_KEPT - 1) :], migration]
        migration.start()
        return migration.status()


def _move_bytes(move: HandOver, demands: dict[str, PartitionDemand], membership: Membership) -> int:
    """What a move ships: one increment to a target that holds a replica, else the whole state."""
    demand = demands.get(move.task)
    if demand is None:
        return 0
    target = membership.node(move.target)
    warm = target is not None and any(task_partition_key_of(k) == move.task for k in target.replicas_held)
    return demand.increment_bytes if warm else demand.size_bytes + demand.increment_bytes


def _busiest_per_core(placement: Placement, loads: Mapping[str, float], cores: Mapping[str, int]) -> float:
    """The largest sum of primaries' loads over a node's cores in `placement`."""
    per_node: dict[str, float] = {}
    for task, group in placement.items():
        per_node[group.primary] = per_node.get(group.primary, 0.0) + loads.get(task, 0.0)
    return max((load / max(cores.get(node, 1), 1) for node, load in per_node.items()), default=0.0)


def _excess(placement: Placement, loads: Mapping[str, float], cores: Mapping[str, int]) -> float:
    """The load per core above the mean, summed over the executors in `cores` (0: perfectly even)."""
    per_node = dict.fromkeys(cores, 0.0)
    for task, group in placement.items():
        per_node[group.primary] = per_node.get(group.primary, 0.0) + loads.get(task, 0.0)
    per_core = [load / max(cores.get(node, 1), 1) for node, load in per_node.items()]
    mean = sum(per_core) / len(per_core) if per_core else 0.0
    return sum(max(0.0, value - mean) for value in per_core)
