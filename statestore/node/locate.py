"""Where the controller says a partition's copies are (`Control.Locate`), for a node that must fetch them from a peer:
our provider's peer loads (statestore.node.materialize) and the state files of Spark's own provider
(statestore.node.file_replicas)."""

from __future__ import annotations

import time

import grpc

from statestore import auth
from statestore.node.settings import NodeSettings
from statestore.rpc import common_pb2, control_pb2, control_pb2_grpc


def locate(settings: NodeSettings, store: common_pb2.StoreRef, deadline: float) -> control_pb2.LocateReply | str:
    """The controller's answer for partition `store` (its replica holders, freshest first, and its live primary),
    asked before `deadline` (time.monotonic()); or why there is none, in words for the provider's log."""
    if not settings.controller:
        return "no controller to locate a peer"
    try:
        with auth.channel(settings.controller) as channel:
            stub = control_pb2_grpc.ControlStub(channel)
            return stub.Locate(store, timeout=max(deadline - time.monotonic(), 0.001))
    except grpc.RpcError as exc:
        return f"the controller did not locate a peer: {exc.code().name}"
