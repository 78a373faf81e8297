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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import grpc

from handover.failover import freshest_holder
from handover.handover import HandOver, HandOverProtocol, HandOverSettings, SparkLevers, Step
from handover.migration import Migration, order_moves
from placement import InfeasiblePlacement, PartitionDemand, Placement, ReplicaGroup, Strategy
from placement.primaries import balance_primaries, balance_primaries_by_load, move_primaries_to_lighter_nodes
from statestore.cluster.membership import Membership, NodeRecord
from statestore.controller.queued_command import Plan, QueuedCommand
from statestore.controller.replica_groups import ReplicaGroups
from statestore.logs import log_event
from statestore.partition_key import normalized_checkpoint_dir, task_partition_key, task_partition_key_of
from statestore.rpc import common_pb2, control_pb2

_KEPT = 8  # operations kept for status once done
_STOPPED_RUNS_CHECKED = 64  # past this many, the stopped runs no partition was last placed by are forgotten
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
    """Runs one operator command at a time, queues those given meanwhile, and remembers the last ones."""

    def __init__(self, membership: Membership, groups: ReplicaGroups, settings: HandOverSettings | None = None) -> None:
        self._membership = membership
        self._groups = groups
        self.settings = settings or HandOverSettings()
        self._levers: SparkLevers | None = None
        self._lock = threading.Lock()
        self._operations: list[Migration | QueuedCommand] = []  # by operation id
        self._queue: list[QueuedCommand] = []  # commands waiting their turn, first first
        self._stopped = False
        self._next_id = 1
        self._stopped_runs: set[str] = set()  # Spark query runs that stopped (the driver's listener said so)

    def attach_spark(self, levers: SparkLevers) -> None:
        """The driver's steering levers (without them, moves are refused: nothing could steer Spark)."""
        self._levers = levers

    # commands
    def move(self, requests: Sequence[PartitionMoveRequest], strategy: str = "") -> control_pb2.OperationStatus:
        """Move each named task partition's primary to the named executor (queued while another operation runs:
        planned when its turn comes)."""
        if not requests:
            raise OperationError(grpc.StatusCode.INVALID_ARGUMENT, "move: name at least one partition")
        return self._submit("move", strategy, lambda: self._plan_moves(requests))

    def _plan_moves(self, requests: Sequence[PartitionMoveRequest]) -> tuple[list[HandOver], list[str]]:
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
                if self._stopped_run(task):
                    notes.append(f"{task}: its query is stopped: it moves with the query's next run, not now")
                    continue
                group = plan.get(task) if plan is not None else None
                members = list(group.nodes) if group is not None else [source]
                replicas = [n for n in members if n not in (source, target.node_id)]
                if target.node_id in members:
                    final = ReplicaGroup(target.node_id, (source, *replicas))  # A stays, as a replica
                else:
                    final = ReplicaGroup(target.node_id, tuple(replicas))  # A drops its copy
                moves.append(HandOver(task, source, target.node_id, final, target.executor_id))
        return moves, notes

    def drain(self, executor: str, strategy: str = "") -> control_pb2.OperationStatus:
        """Move every primary and replica off `executor` (queued while another operation runs: the executor is
        marked as being drained only once its turn comes)."""
        node = self.resolve_executor(executor, for_target=False).node_id

        def plan() -> tuple[list[HandOver], list[str]]:
            record = self.resolve_executor(executor, for_target=False)  # still alive when its turn comes
            # Live executors only: a node drained long ago may be dead and still listed as draining.
            left = len(set(self._membership.live_node_ids()) - self._groups.draining() - {record.node_id})
            if left < 1:
                raise OperationError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"cannot drain executor {executor}: no other live executor would be left to take its partitions",
                )
            if left < self._groups.q + 1:
                # Drained executors stay out of every plan: fewer than q+1 left cannot hold a primary and q
                # replicas of each partition, and the groups would stay short until an executor is added.
                raise OperationError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"cannot drain executor {executor}: {left} executor(s) would be left to hold each partition's "
                    f"primary and its {self._groups.q} replica(s), which needs {self._groups.q + 1}; add an executor "
                    "first (Spark's own decommission of an executor is drained regardless)",
                )
            moves, notes = self._moves_to(self._target(None, exclude=frozenset({record.node_id})))
            self._groups.drain(record.node_id)
            notes.append(f"node {record.node_id} is kept out of every plan from now on")
            return moves, notes

        # A drain that does not start (queued, refused) must not leave the executor marked as being drained:
        # every move to it would be refused meanwhile.
        undo = None if node in self._groups.draining() else (lambda: self._groups.undrain(node))
        return self._submit("drain", strategy, plan, undo)

    def decommissioning(self, executor_id: str) -> int | None:
        """`decommissioning_all` of one executor: its drain's operation id (0: nothing to drain), None while
        another operation (not a drain) is still running (call again)."""
        return self.decommissioning_all([executor_id])[executor_id]

    def decommissioning_all(self, executor_ids: list[str]) -> dict[str, int | None]:
        """Spark is decommissioning `executor_ids` (one event: dynamic allocation scales several down at once):
        each runs no new task and exits about a second after its last one. Drain them at once, all at once, in one
        operation: each primary goes to its freshest replica holder on a node not being drained (urgent moves:
        only that holder must be warm, new replicas follow), its replicas to other nodes, and no plan uses their
        nodes again. Every node of the event is taken out of the plans before any is planned, so that no move goes
        from one to another. Moves of a running operation to them fail. Returns, per executor, its drain's
        operation id (0: the executor has no state node, or nothing to drain), None while another operation is
        still running or its node is silent (call again). A drain still running takes the executors of a later
        event in (`Migration.join`): they exit long before it ends."""
        answers: dict[str, int | None] = {}
        records: dict[str, NodeRecord] = {}
        for executor_id in executor_ids:
            node_id = self._membership.node_of_executor(executor_id)
            record = self._membership.node(node_id) if node_id else None
            if record is None:
                log_event(_log, "decommission_not_drained", executor=executor_id, why="no state node")
                answers[executor_id] = 0
                continue
            if not self._membership.is_alive(record):
                # Silent past dead_after (a pause, a slow network), maybe not for good: asked again at the next
                # call, while Spark still decommissions the executor (0 would be final).
                answers[executor_id] = None
                continue
            records[executor_id] = record
        for record in records.values():
            self._groups.drain(record.node_id)
        with self._lock:
            running = [m for m in self._operations if m.running]
        for executor_id, record in list(records.items()):
            covering = next((m for m in running if record.node_id in m.draining), None)
            if covering is not None:
                answers[executor_id] = covering.operation_id
                del records[executor_id]
                continue
            for migration in running:
                abandoned = migration.abandon_target(
                    record.node_id, f"Spark is decommissioning executor {executor_id}: the move cannot end there"
                )
                if abandoned:
                    log_event(_log, "moves_abandoned", operation=migration.operation_id, tasks=abandoned)
        if not records:
            return answers
        # The executors exit about a second after their last task, long before a running operation ends (another
        # decommission's drain, an operator's command, the load-balancing policy's): they join it. Its moves off
        # them that are not steered yet fail, and are planned again here, urgent.
        joinable = running[0] if len(running) == 1 else None
        if running and joinable is None:
            return {**answers, **dict.fromkeys(records)}
        left = frozenset(record.node_id for record in records.values())
        unsteered = _unsteered_from(joinable, left) if joinable is not None else frozenset()
        if joinable is not None and unsteered:
            why = f"Spark is decommissioning node(s) {', '.join(sorted(left))}: moved at once instead"
            joinable.abandon_tasks(unsteered, why)
        avoided = left | frozenset(joinable.draining if joinable is not None else ())
        try:
            moves, notes = self._decommission_moves(records, avoided)
        except OperationError as exc:  # no placement fits the nodes left: failover covers them when they go
            log_event(_log, "decommission_deferred", logging.WARNING, executors=sorted(records), why=str(exc))
            return {**answers, **dict.fromkeys(records)}
        if joinable is not None:
            # Moved by the drain under way already, unless to the executors going now: those moves fail (maybe
            # only before its next step, see Migration._when_idle) and their partitions get new ones here.
            busy = {
                m.task for m in joinable.moves
                if not m.finished and not (m.target in left and m.moves_primary and not m.served)
                and m.task not in unsteered
            }  # fmt: skip
            moves = [m for m in moves if m.task not in busy]
            if not joinable.join(moves, notes, left):
                return {**answers, **dict.fromkeys(records)}  # it ended meanwhile: the next call starts a drain
            started = joinable
        else:
            try:
                # Ahead of any queued command: the executors exit about a second after their last task.
                status = self._start("decommission", Strategy.ALL_AT_ONCE, moves, notes, jump_queue=True)
            except OperationError as exc:  # another operation started meanwhile
                log_event(_log, "decommission_deferred", executors=sorted(records), why=str(exc))
                return {**answers, **dict.fromkeys(records)}
            with self._lock:
                started = next(m for m in self._operations if m.operation_id == status.operation_id)
            started.draining.update(left)
        for executor_id, record in records.items():
            log_event(_log, "decommission_drain", executor=executor_id, node=record.node_id,
                      operation=started.operation_id, moves=len(moves), joined=joinable is not None)  # fmt: skip
            answers[executor_id] = started.operation_id
        return answers

    def _decommission_moves(
        self, records: dict[str, NodeRecord], avoided: frozenset[str]
    ) -> tuple[list[HandOver], list[str]]:
        """The urgent moves that take every primary off the nodes in `avoided` (those of `records`, Spark's
        executors being decommissioned now, and any a running drain empties), each to its freshest replica holder
        elsewhere, and the notes saying so."""
        running_primaries = self._running_primaries()
        pins = {task: node for task, node in running_primaries.items() if node not in avoided}
        notes = [
            f"Spark is decommissioning executor {executor_id} (node {record.node_id}): it runs no new task and "
            "exits once idle, so its partitions are handed over at the next batch, all at once, each to its "
            "freshest replica holder; new replicas warm up after"
            for executor_id, record in records.items()
        ]
        for task, node in sorted(running_primaries.items()):
            if node not in avoided:
                continue
            stores = self._membership.stores_of_task(task)
            holder = freshest_holder(self._membership, task, stores, exclude=avoided | self._groups.draining())
            if holder is None:
                notes.append(
                    f"{task}: no live replica holder: its new primary warms up first (if the executor is gone "
                    "before, the partition loads from the checkpoint location where Spark runs it)"
                )
                continue
            pins[task] = holder[0].node_id
        # The moves are judged against the snapshot the pins came from: a partition whose primary a report moved
        # between two readings would otherwise be handed over from a node that is not the one decommissioned.
        moves, more = self._moves_to(self._target(pins, exclude=avoided, running=running_primaries))
        for move in moves:
            move.urgent = True
        return moves, [*notes, *more]

    def query_stopped(self, run_id: str) -> int:
        """Spark query run `run_id` stopped: the primary moves of its partitions that are not served yet end
        (failed, saying so) instead of waiting for a batch it will not run, and no later command moves their
        primaries. Returns how many moves ended."""
        placed_by = (
            {p.report.place.run_id for p in self._membership.partitions()}
            if len(self._stopped_runs) >= _STOPPED_RUNS_CHECKED
            else None
        )
        with self._lock:
            if placed_by is not None:  # a run that placed no partition left can steer nothing: not kept for ever
                self._stopped_runs &= placed_by
            self._stopped_runs.add(run_id)
            running = [m for m in self._operations if isinstance(m, Migration) and m.running]
        tasks = frozenset(
            task for migration in running for move in migration.moves for task in [move.task] if self._stopped_run(task)
        )
        ended = 0
        for migration in running:
            abandoned = migration.abandon_tasks(tasks, f"its query stopped (run {run_id}) before Spark ran the batch")
            if abandoned:
                log_event(_log, "moves_abandoned", operation=migration.operation_id, tasks=abandoned)
            ended += len(abandoned)
        return ended

    def _stopped_run(self, task: str) -> bool:
        """Whether every store of task partition `task` was last placed by a query run that stopped."""
        stores = self._membership.stores_of_task(task)
        return bool(stores) and all(s.report.place.run_id in self._stopped_runs for s in stores)

    def draining(self) -> frozenset[str]:
        """The nodes being drained (no plan places anything there)."""
        return self._groups.draining()

    def steered_from(self, node_id: str) -> frozenset[str]:
        """Task partitions a running operation has steered off `node_id` (failover leaves them to it)."""
        with self._lock:
            running = [m for m in self._operations if m.running]
        return frozenset(task for m in running for task in m.steered_from(node_id))

    def rebalance(self, strategy: str = "", dry_run: bool = False) -> control_pb2.OperationStatus:
        """Re-plan primaries and replicas (primaries not pinned) and carry out the moves (queued while another
        operation runs; a dry run answers at once)."""

        def plan() -> tuple[list[HandOver], list[str]]:
            target = self._target({})
            if target is not None:
                placement, running = target
                fixed = frozenset(t for t in placement if t not in running or self._stopped_run(t))
                target = (balance_primaries(placement, fixed), running)
            moves, notes = self._moves_to(target)
            if not moves:
                notes.append("the placement in force is already balanced: nothing to move")
            return moves, notes

        if dry_run:
            return self._start("rebalance", strategy, *plan(), dry_run=True)
        return self._submit("rebalance", strategy, plan)

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
        target = self._target(None)
        if target is None:
            return None
        placement, running = target
        # A stopped query's partitions stay known for a while (Spark keeps their stores loaded, then the controller
        # remembers them for forget_after): their load is no executor's any more, and their primaries stay.
        stopped = frozenset(t for t in placement if t in running and self._stopped_run(t))
        loads = {t: load for t, load in loads.items() if t not in stopped}
        fixed = frozenset(t for t in placement if t not in running) | stopped
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
        if not moves:
            return None
        more = [note for note in more if any(note.startswith(f"{task}:") for task in swapped)]
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
        """Stop the running operation's thread and start nothing queued (the controller is stopping)."""
        with self._lock:
            self._stopped = True
            self._queue.clear()
            for migration in self._operations:
                if isinstance(migration, Migration):
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
                grpc.StatusCode.FAILED_PRECONDITION,
                f"executor {spec!r} (node {record.node_id}) is dead: pick a live one (`statestore status` lists them)",
            )
        if for_target and record.node_id in self._groups.draining():
            raise OperationError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"executor {spec!r} (node {record.node_id}) is being drained: it takes no partitions for the rest of "
                "its life (it is leaving); pick another executor",
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
    def _target(
        self,
        pins: dict[str, str] | None,
        exclude: frozenset[str] = frozenset(),
        running: dict[str, str] | None = None,
    ) -> tuple[Placement, dict[str, str]] | None:
        """`ReplicaGroups.target`, its refusal as an operation's error (a command, a decommission's drain)."""
        try:
            return self._groups.target(pins, exclude=exclude, running=running)
        except InfeasiblePlacement as exc:
            raise OperationError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"no placement of the replica groups fits the nodes left: {exc}",
            ) from exc

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
            if self._stopped_run(task):
                # A primary move waits for Spark to run a batch of the partition, which a stopped query never runs;
                # its replicas get no increments to catch up with, and the controller forgets the partition a
                # minute after its primary unloads it: it is left as it is (its next run is steered at its start).
                notes.append(f"{task}: its query is stopped: left on node {source}")
                continue
            moves.append(HandOver(task, source, group.primary, group, executors.get(group.primary, "")))
        return moves, notes

    def _submit(
        self, kind: str, strategy: str, plan: Plan, undo: Callable[[], None] | None = None
    ) -> control_pb2.OperationStatus:
        """Plan and start an operator's command, or queue it behind the running operation. Names, the strategy
        and preconditions are checked now (a refusal says what is wrong); a queued command is planned again
        when its turn comes."""
        _strategy(strategy)
        try:
            moves, notes = plan()
            return self._start(kind, strategy, moves, notes)
        except _Busy as busy:
            if undo is not None:
                undo()
            with self._lock:
                queued = QueuedCommand(self._next_id, kind, strategy, plan, busy.operation_id, undo)
                self._next_id += 1
                self._queue.append(queued)
                self._operations = _kept([*self._operations, queued])
            log_event(_log, "operation_queued", operation=queued.operation_id, kind=kind, behind=busy.operation_id)
            self._start_next()  # the running one may have ended meanwhile
            return queued.status()
        except OperationError:
            if undo is not None:
                undo()
            raise

    def _start_next(self) -> None:
        """Start the first queued command once nothing runs (called as each operation ends)."""
        with self._lock:
            if self._stopped or not self._queue or any(m.running for m in self._operations):
                return
            queued = self._queue.pop(0)
        try:
            moves, notes = queued.plan()
            self._start(queued.kind, queued.strategy, moves, notes, operation_id=queued.operation_id, from_queue=True)
        except _Busy:  # a decommission's drain went first: wait for it
            if queued.undo is not None:
                queued.undo()
            with self._lock:
                self._queue.insert(0, queued)
            self._start_next()
        except OperationError as exc:
            if queued.undo is not None:
                queued.undo()
            queued.fail(str(exc))
            log_event(_log, "queued_operation_failed", logging.WARNING, operation=queued.operation_id, error=str(exc))
            self._start_next()

    def _start(
        self,
        kind: str,
        strategy: str,
        moves: list[HandOver],
        notes: list[str],
        dry_run: bool = False,
        operation_id: int | None = None,
        from_queue: bool = False,
        jump_queue: bool = False,
    ) -> control_pb2.OperationStatus:
        """Carry `moves` out now; raises _Busy while an operation runs (or commands wait in the queue, unless
        this one comes `from_queue` or may `jump_queue`). A dry run is never refused: it carries nothing out."""
        chosen = _strategy(strategy)
        if moves and not dry_run and self._levers is None:
            raise OperationError(
                grpc.StatusCode.FAILED_PRECONDITION,
                "this controller has no Spark driver to steer tasks with: moves need the controller the driver "
                "plugin starts beside the driver's JVM (spark.plugins=io.statestore.spark.StatestorePlugin, no "
                "controller setting)",
            )
        with self._lock:
            if not dry_run:
                busy = next((m for m in self._operations if m.running), None)
                if busy is None and self._queue and not (from_queue or jump_queue):
                    busy = self._queue[-1]
                if busy is not None:
                    raise _Busy(busy.operation_id, busy.kind)
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
            if operation_id is None:
                operation_id = self._next_id
                self._next_id += 1
            migration = Migration(operation_id, kind, chosen, moves, protocol, notes, dry_run, self._start_next)
            # A queued command keeps its place (and id) in the list.
            kept = [m for m in self._operations if m.operation_id != operation_id]
            self._operations = _kept(sorted([*kept, migration], key=lambda m: m.operation_id))
        migration.start()
        if not migration.running:  # nothing to carry out: the next in line may start
            self._start_next()
        return migration.status()


class _Busy(OperationError):
    """Another operation runs (or commands wait their turn)."""

    def __init__(self, operation_id: int, kind: str) -> None:
        super().__init__(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"operation {operation_id} ({kind}) is still running: wait for it (statestore status) before "
            "starting another",
        )
        self.operation_id = operation_id


def _strategy(strategy: str) -> Strategy:
    """The strategy named (the default: batched); INVALID_ARGUMENT naming the choices otherwise."""
    try:
        return Strategy(strategy or Strategy.BATCHED)
    except ValueError:
        raise OperationError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"unknown strategy {strategy!r}: one of {', '.join(s.value for s in Strategy)}",
        ) from None


def _unsteered_from(migration: Migration, nodes: frozenset[str]) -> frozenset[str]:
    """The task partitions `migration` moves primaries of off `nodes` and has not steered yet."""
    early = (Step.DECIDED, Step.WARMING_UP, Step.WARM)
    return frozenset(m.task for m in migration.moves if m.moves_primary and m.source in nodes and m.step in early)


def _kept(operations: list) -> list:
    """The operations to keep listing: every one running or queued, and the last `_KEPT` ended, of which one dry
    run at most (the load-balancing policy in dry-run mode plans one every few batches: the operations carried out
    went out of the list within minutes)."""
    ended = [o for o in operations if not _in_flight(o)]
    dry_runs = [o for o in ended if getattr(o, "dry_run", False)]
    ended = [o for o in ended if not getattr(o, "dry_run", False) or o is dry_runs[-1]]
    keep = {id(o) for o in ended[-_KEPT:]}
    return [o for o in operations if _in_flight(o) or id(o) in keep]


def _in_flight(operation: Migration | QueuedCommand) -> bool:
    if isinstance(operation, QueuedCommand):
        return operation.ended_at is None
    return operation.running


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
