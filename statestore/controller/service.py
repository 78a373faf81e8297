"""The Control gRPC service: register, heartbeat (answered with replica groups) and status."""

from __future__ import annotations

import logging

import grpc

from statestore.controller.membership import Membership
from statestore.controller.replica_groups import ReplicaGroups
from statestore.controller.status import build_status, replica_groups_of
from statestore.node.logs import log_event
from statestore.rpc import common_pb2, control_pb2, control_pb2_grpc

_log = logging.getLogger("statestore.controller")


class ControlService(control_pb2_grpc.ControlServicer):
    """Membership and status for nodes and the `statestore status` command."""

    def __init__(self, membership: Membership, replication_factor: int, heartbeat_interval: float) -> None:
        self._membership = membership
        self._q = replication_factor
        self.replica_groups = ReplicaGroups(membership, replication_factor)
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
        """Record the node's report; answer with its primary partitions' replica groups, its demotions and
        the replicas it should drop."""
        if not request.node.node_id:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "node.node_id is required")
        self._membership.heartbeat(request)
        groups = replica_groups_of(self._membership, self.replica_groups, request.node.node_id)
        demoted = self._membership.demoted(request.node.node_id)
        for store in demoted:
            log_event(
                _log,
                "primary_demoted",
                node=request.node.node_id,
                store=store.store_id,
                checkpoint=store.checkpoint_dir,
            )
        retired = self._retired_replicas(request.node.node_id)
        for store in retired:
            log_event(
                _log,
                "replica_retired",
                node=request.node.node_id,
                store=store.store_id,
                checkpoint=store.checkpoint_dir,
            )
        return control_pb2.HeartbeatReply(groups=groups, demoted=demoted, retired_replicas=retired)

    def _retired_replicas(self, node_id: str) -> list[common_pb2.StoreRef]:
        """The replicas `node_id` holds of partitions forgotten, or placed without a role for it."""
        known = {p.key for p in self._membership.partitions()}
        retired = []
        for key, store in self._membership.replicas_of(node_id).items():
            if key not in known or self.replica_groups.has_role(key, node_id) is False:
                retired.append(store)
        return retired

    def Status(self, request: control_pb2.StatusRequest, context: grpc.ServicerContext) -> control_pb2.StatusReply:
        """Nodes, partitions, replica groups, versions held and lag."""
        return build_status(self._membership, self.replica_groups, self._q)
