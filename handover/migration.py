"""Migration strategies: an operator command's hand-overs carried out batch after batch (Megaphone, seed
000_41c3de605f32fc0b.txt; DESIGN.md section 4, "Migration strategies").

`all-at-once` steers every move at the same micro-batch; `fluid` one move per micro-batch; `batched` in
Megaphone's matched batches, where no node takes part in two moves of one batch (`placement.handover`). A
strategy batch warms up its moves' targets, steers them together (so they share b*), and ends when each of its
moves is promoted or failed; then the next one starts. Moves settle (step 6) in the background meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from handover.handover import HandOver, HandOverProtocol, Step
from placement import Move, Role, Strategy
from placement.handover import plan_handover
from statestore.rpc import control_pb2

_TICK_SECONDS = 0.1
_MAX_ERRORS = 50  # unexpected errors in a row (5 s of ticks) before a move fails with the last one
_log = logging.getLogger("statestore.controller.migration")


def order_moves(
    moves: Sequence[HandOver],
    strategy: Strategy,
    move_bytes: Callable[[HandOver], int],
    primaries: Mapping[str, int] | None = None,
) -> None:
    """Number each move's strategy batch (`HandOver.batch`) by `strategy`; `move_bytes` is what a move ships;
    `primaries` (node -> task partitions whose primary it holds now) orders the batches so that no executor runs
    more stateful tasks in a micro-batch of the migration than before or after it (`placement.handover`)."""
    placement_moves = []
    for index, move in enumerate(moves):
        receiver = (
            move.target if move.moves_primary else next((n for n in move.final.nodes if n != move.source), move.target)
        )
        placement_moves.append(
            Move(
                str(index),
                Role.PRIMARY if move.moves_primary else Role.REPLICA,
                move.source,
                receiver,
                move_bytes(move),
                move.source,
            )
        )
    plan = plan_handover(placement_moves, strategy, primaries)
    for number, batch in enumerate(plan.batches):
        for placed in batch:
            moves[int(placed.partition)].batch = number


class Migration:
    """One operator command (move, drain, rebalance) carried out on a thread of its own."""

    def __init__(
        self,
        operation_id: int,
        kind: str,
        strategy: Strategy,
        moves: list[HandOver],
        protocol: HandOverProtocol,
        notes: list[str],
        dry_run: bool = False,
        on_end: Callable[[], None] | None = None,
    ) -> None:
        """`on_end` is called on the operation's thread once every move is finished."""
        self.operation_id = operation_id
        self.kind = kind
        self.strategy = strategy
        self.moves = moves
        self.notes = notes
        self.dry_run = dry_run
        self._on_end = on_end
        self._protocol = protocol
        self._batches = max((m.batch for m in moves), default=-1) + 1
        self._batch = 0
        self._started = time.monotonic()
        self._ended: float | None = time.monotonic() if dry_run or not moves else None
        self._stopped = threading.Event()
        self._errors: dict[str, int] = {}  # task -> unexpected errors in a row
        self.draining: set[str] = set()  # nodes a decommission drains
        self._step_lock = threading.Lock()  # one step at a time per operation: its thread's, or a request's
        # Requests of other threads (abandon, join) that found a step under way: a step may wait on the driver's
        # steer or locate RPC (seconds when the driver is slow), and Spark's events thread must not wait with it.
        # The operation's thread runs them before its next step.
        self._inbox: list[Callable[[], None]] = []
        self._inbox_lock = threading.Lock()

    def start(self) -> None:
        """Carry the moves out on a daemon thread (nothing for a dry run)."""
        if self._ended is None:
            with self._step_lock:  # listed already: another thread's request may come before the decisions
                for move in self.moves:
                    self._protocol.decide(move)
            threading.Thread(target=self._run, name=f"statestore-migration-{self.operation_id}", daemon=True).start()

    def stop(self) -> None:
        """Stop at the next tick (the controller is stopping)."""
        self._stopped.set()

    @property
    def running(self) -> bool:
        """Whether moves are still being carried out."""
        return self._ended is None

    def incoming(self, node_id: str) -> list[str]:
        """The task partitions whose primary this operation moves to `node_id` in its current or next strategy
        batch and that are not served there yet: what that node's executor may open ahead of the move."""
        soon = self._batch + 1
        return [
            m.task
            for m in self.moves
            if m.target == node_id and m.moves_primary and not m.served and m.batch <= soon
        ]

    def steered_from(self, node_id: str) -> list[str]:
        """The task partitions whose primary this operation has steered off `node_id` and not promoted yet."""
        return [m.task for m in self.moves if m.source == node_id and m.moves_primary and m.step is Step.STEERED]

    def abandon_tasks(self, tasks: frozenset[str], why: str) -> list[str]:
        """Fail the primary moves of `tasks` that are not served yet; returns their tasks. Without waiting for a
        step under way (`_when_idle`): the moves then fail before the operation's next step."""
        return self._abandon(lambda move: move.task in tasks, why)

    def abandon_target(self, node_id: str, why: str) -> list[str]:
        """Fail the moves to `node_id` that are not served yet (its executor is going); returns their tasks, as
        `abandon_tasks`."""
        return self._abandon(lambda move: move.target == node_id, why)

    def _abandon(self, chosen: Callable[[HandOver], bool], why: str) -> list[str]:
        def doomed() -> list[HandOver]:
            return [m for m in self.moves if chosen(m) and m.moves_primary and not m.served]

        def fail() -> None:
            for move in doomed():
                self._protocol.fail(move, why)

        tasks = [m.task for m in doomed()]
        return tasks if tasks and self._when_idle(fail) else []

    def join(self, moves: list[HandOver], notes: list[str], draining: frozenset[str]) -> bool:
        """Add `moves` to this running operation, in its current strategy batch (another decommission event while
        this one drains: its executors exit in about a second, and waiting for this operation to end would leave
        their partitions to failover). Returns False when the operation has ended meanwhile (start another)."""

        def add() -> None:
            for move in moves:
                move.batch = self._batch
                self._protocol.decide(move)
            self.moves = [*self.moves, *moves]  # a new list: a loop over the old one goes on undisturbed
            self.notes.extend(notes)
            self.draining.update(draining)

        return self._when_idle(add)

    def _when_idle(self, request: Callable[[], None]) -> bool:
        """Run `request` under the step lock: now if no step is under way, else queued for the operation's thread,
        which runs it before its next step. False when the operation has ended (nothing would run it)."""
        with self._inbox_lock:
            if self._ended is not None:
                return False
            self._inbox.append(request)
        if self._step_lock.acquire(blocking=False):
            try:
                self._run_requests()
            finally:
                self._step_lock.release()
        return True

    def _run_requests(self) -> None:
        """Run the queued requests (call with the step lock held)."""
        with self._inbox_lock:
            requests, self._inbox = self._inbox, []
        for request in requests:
            try:
                request()
            except Exception:
                _log.exception("operation %d: a request failed", self.operation_id)

    def _run(self) -> None:
        for batch in range(self._batches):
            self._batch = batch
            current = [m for m in self.moves if m.batch == batch]
            while not self._stopped.is_set() and not all(m.served for m in current):
                current = [m for m in self.moves if m.batch == batch]  # moves joined since count too
                with self._step_lock:  # opened_ahead records a step: not while abandon fails the move
                    self._run_requests()
                    ready = all(
                        (m.step is Step.WARM and self._protocol.opened_ahead(m)) or m.step is Step.STEERED or m.served
                        for m in current
                    )
                for move in self.moves:
                    if move.batch < batch or move in current:
                        # An urgent move (its executor is going) is steered as soon as its target is warm.
                        self._advance(move, may_steer=ready or move.urgent)
                self._stopped.wait(_TICK_SECONDS)
        while True:
            with self._step_lock:
                self._run_requests()
                if self._stopped.is_set() or all(m.finished for m in self.moves):
                    with self._inbox_lock:  # ended only with no request left: `join` adds to a running one or none
                        if not self._inbox:
                            self._ended = time.monotonic()
                            break
                    continue
            for move in self.moves:
                self._advance(move, may_steer=True)
            self._stopped.wait(_TICK_SECONDS)
        if self._on_end is not None and not self._stopped.is_set():
            self._on_end()

    def _advance(self, move: HandOver, may_steer: bool) -> None:
        """One step of `move`. An unexpected error (a bug, or a re-plan failing while groups are held) is logged
        and retried at the next tick; after `_MAX_ERRORS` in a row the move fails with it, so an operation never
        stays running with no thread carrying it out."""
        try:
            with self._step_lock:
                self._run_requests()
                self._protocol.advance(move, may_steer)
            self._errors.pop(move.task, None)
        except Exception as exc:
            count = self._errors.get(move.task, 0) + 1
            self._errors[move.task] = count
            _log.exception("operation %d: move of %s failed to advance (%d in a row)", self.operation_id, move.task,
                           count)  # fmt: skip
            if count >= _MAX_ERRORS and not move.finished:
                with self._step_lock:
                    self._protocol.fail(move, f"the controller could not advance it: {exc!r}")

    def status(self) -> control_pb2.OperationStatus:
        """The operation and each of its moves, as `statestore status` and `--wait` show them."""
        if self.dry_run:
            state = "planned"
        elif self._ended is None:
            state = "running"
        elif any(m.step is Step.FAILED for m in self.moves):
            state = "failed"
        else:
            # Stopped with the controller before every move ended: not done.
            state = "done" if all(m.finished for m in self.moves) else "stopped"
        failed = [m for m in self.moves if m.step is Step.FAILED]
        reply = control_pb2.OperationStatus(
            operation_id=self.operation_id,
            kind=self.kind,
            strategy=str(self.strategy),
            state=state,
            batches=self._batches,
            batch=self._batch,
            error=f"{len(failed)} of {len(self.moves)} move(s) failed" if failed else "",
            seconds=(self._ended or time.monotonic()) - self._started,
            notes=self.notes,
        )
        for move in self.moves:
            reply.moves.append(
                control_pb2.HandOverStatus(
                    partition=move.task,
                    source_node=move.source,
                    target_node=move.target,
                    target_executor=move.target_executor,
                    final_group=list(move.final.nodes),
                    step=str(move.step),
                    batch=move.batch,
                    steered_at_version=move.steered_at_version,
                    effective_version=move.effective_version,
                    attempts=move.attempts,
                    load_source=move.load_source,
                    loaded_from_version=move.loaded_from_version,
                    load_millis=move.load_millis,
                    seconds_to_promote=move.promoted_at - move.started_at if move.promoted_at else 0.0,
                    seconds=(move.ended_at or time.monotonic()) - move.started_at if move.started_at else 0.0,
                    log=move.log,
                    error=move.error,
                    source_after=move.source_after,
                    waiting_for=move.waiting_for,
                )
            )
        return reply
