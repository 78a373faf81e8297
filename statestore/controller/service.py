"""The Control gRPC service: register, heartbeat (answered with replica groups) and status."""

from __future__ import annotations

import logging
from collections.abc import Callable

import grpc

from handover.failover import Failover
from placement import InfeasiblePlacement
from statestore.cluster.membership import Membership
from statestore.controller.operations import OperationError, Operations, PartitionMoveRequest
from statestore.controller.replica_groups import ReplicaGroups
from statestore.controller.retired_replicas import RetiredReplicas
from statestore.controller.sent_groups import SentGroups
from statestore.controller.status import build_status
from statestore.faults.points import FaultInjected, fault_point
from statestore.logs import log_event
from statestore.message_integrity import arrived_intact, checksum_metadata
from statestore.partition_key import normalized, partition_key
from statestore.rpc import common_pb2, control_pb2, control_pb2_grpc

_log = logging.getLogger("statestore.controller")


class ControlService(control_pb2_grpc.ControlServicer):
    """Membership and status for nodes and the `statestore status` command."""

    def __init__(
        self,
        membership: Membership,
        replication_factor: int,
        heartbeat_interval: float,
        rereplication_delay: float = 0.0,
    ) -> None:
        self._membership = membership
        self._q = replication_factor
        self.replica_groups = ReplicaGroups(membership, replication_factor, rereplication_delay)
        self.failover = Failover(membership)
        self.operations = Operations(membership, self.replica_groups)
        self._sent_groups = SentGroups(membership, self.replica_groups)
        self._retired = RetiredReplicas(membership, self.replica_groups)
        self._heartbeat_interval = heartbeat_interval

    def Register(
        self, request: control_pb2.RegisterRequest, context: grpc.ServicerContext
    ) -> control_pb2.RegisterReply:
        """A node joins."""
        if not request.node.node_id or not request.node.address:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "node.node_id and node.address are required")
        self._membership.register(request.node)
        log_event(
            _log, "node_registered", node=request.node.node_id, address=request.node.address, rack=request.node.rack
        )
        return control_pb2.RegisterReply(
            replication_factor=self._q, heartbeat_interval_seconds=self._heartbeat_interval
        )

    def Heartbeat(
        self, request: control_pb2.HeartbeatRequest, context: grpc.ServicerContext
    ) -> control_pb2.HeartbeatReply:
        """Record the node's report; answer with its primary partitions' replica groups, its demotions, the
        replicas it should drop and the partitions a running hand-over moves to it."""
        if not arrived_intact(request, context.invocation_metadata()):
            context.abort(
                grpc.StatusCode.DATA_LOSS,
                f"the heartbeat of node {request.node.node_id!r} arrived corrupted (its checksum does not match): "
                "ignored; the node sends the next one",
            )
        if not request.node.node_id:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "node.node_id is required")
        try:
            fault_point("heartbeat", "")
        except FaultInjected as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        reports_epoch = self._membership.heartbeat(request)
        node_id = request.node.node_id
        self.replica_groups.current(wait=False)  # re-plans first if what placement depends on changed
        groups, epoch = self._sent_groups.answer(node_id, request.groups_epoch)
        demoted = self._membership.demoted(node_id)
        for held in demoted:
            log_event(
                _log,
                "primary_demoted",
                node=node_id,
                store=held.store.store_id,
                checkpoint=held.store.checkpoint_dir,
                version=held.version,
            )
        retired = self._retired.of(node_id)
        self._membership.forget_replicas(node_id, [partition_key(store) for store in retired])
        for store in retired:
            log_event(_log, "replica_retired", node=node_id, store=store.store_id, checkpoint=store.checkpoint_dir)
        incoming = self.operations.incoming(node_id)
        if lost := self.failover.incoming(node_id):
            planned = {partition_key(store) for store in incoming}
            incoming += [store for store in lost if partition_key(store) not in planned]
        reply = control_pb2.HeartbeatReply(
            groups=groups,
            demoted=demoted,
            retired_replicas=retired,
            incoming=incoming,
            groups_epoch=epoch,
            reports_epoch=reports_epoch,
        )
        context.set_trailing_metadata(checksum_metadata(reply))
        return reply

    def Status(self, request: control_pb2.StatusRequest, context: grpc.ServicerContext) -> control_pb2.StatusReply:
        """Nodes, partitions, replica groups, versions held and lag, how each partition was last loaded."""
        reply = build_status(self._membership, self.replica_groups, self._q, self.failover)
        reply.operations.extend(self.operations.recent())
        return reply

    def Move(self, request: control_pb2.MoveRequest, context: grpc.ServicerContext) -> control_pb2.OperationStatus:
        """Start moving task partitions' primaries to the executors named."""
        moves = [PartitionMoveRequest(m.partition, m.to_executor, m.query) for m in request.moves]
        return self._command(context, "move", lambda: self.operations.move(moves, request.strategy))

    def Drain(self, request: control_pb2.DrainRequest, context: grpc.ServicerContext) -> control_pb2.OperationStatus:
        """Start moving every primary and replica off an executor."""
        return self._command(context, "drain", lambda: self.operations.drain(request.executor, request.strategy))

    def Rebalance(
        self, request: control_pb2.RebalanceRequest, context: grpc.ServicerContext
    ) -> control_pb2.OperationStatus:
        """Re-plan and start carrying out the moves (only plan them with dry_run)."""
        return self._command(context, "rebalance", lambda: self.operations.rebalance(request.strategy, request.dry_run))

    def Operation(
        self, request: control_pb2.OperationRequest, context: grpc.ServicerContext
    ) -> control_pb2.OperationStatus:
        """One operation's progress."""
        return self._command(context, "operation", lambda: self.operations.status(request.operation_id))

    @staticmethod
    def _command(
        context: grpc.ServicerContext, name: str, run: Callable[[], control_pb2.OperationStatus]
    ) -> control_pb2.OperationStatus:
        try:
            reply = run()
        except OperationError as exc:
            log_event(_log, "command_refused", logging.WARNING, command=name, error=str(exc))
            context.abort(exc.code, str(exc))
        except InfeasiblePlacement as exc:
            log_event(_log, "command_refused", logging.WARNING, command=name, error=str(exc))
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"{name}: placement found no layout: {exc}")
        if name != "operation":
            log_event(_log, "command_started", command=name, operation=reply.operation_id, moves=len(reply.moves))
        return reply

    def Locate(self, request: common_pb2.StoreRef, context: grpc.ServicerContext) -> control_pb2.LocateReply:
        """The live nodes holding a replica of the partition, freshest first, and its live primary."""
        key = partition_key(normalized(request))
        reply = control_pb2.LocateReply(
            holders=[
                control_pb2.Holder(node=control_pb2.NodeRef(node_id=r.node_id, address=r.address), version=v)
                for r, v in self._membership.holders(key)
            ]
        )
        partition = self._membership.partition(key)
        primary = self._membership.node(partition.primary) if partition is not None else None
        if partition is not None and primary is not None and self._membership.is_alive(primary):
            reply.primary.node.node_id, reply.primary.node.address = primary.node_id, primary.address
            reply.primary.version = partition.report.version
        return reply
