"""Heartbeats checked end to end against a real controller over gRPC: a heartbeat whose bytes changed on the way
(and still parse) is refused, not believed, and the reply carries a checksum the node checks."""

from __future__ import annotations

import grpc
import pytest

from statestore import auth
from statestore.controller.server import Controller
from statestore.message_integrity import CHECKSUM_KEY, arrived_intact, checksum, checksum_metadata
from statestore.rpc import common_pb2, control_pb2, control_pb2_grpc


def heartbeat(checkpoint: str) -> control_pb2.HeartbeatRequest:
    node = control_pb2.NodeRef(node_id="n1", address="127.0.0.1:1", executor_id="1", executor_host="h")
    store = common_pb2.StoreRef(store_id="0/2/default", checkpoint_dir=checkpoint)
    return control_pb2.HeartbeatRequest(node=node, primaries=[control_pb2.PrimaryReport(store=store, version=5)])


def known_checkpoints(stub: control_pb2_grpc.ControlStub) -> set[str]:
    status = stub.Status(control_pb2.StatusRequest(), timeout=5)
    return {p.store.checkpoint_dir for p in status.partitions}


def test_a_heartbeat_changed_on_the_way_is_refused_and_registers_nothing(controller: Controller) -> None:
    sent = heartbeat("/tmp/q/checkpoint/state/0/2")
    # What a flipped byte on the controller link made of one: a checkpoint location no query has.
    arrived = heartbeat("?tmp/q/checkpoint/state/0/2")
    with auth.channel(f"127.0.0.1:{controller.port}") as channel:
        stub = control_pb2_grpc.ControlStub(channel)
        stub.Register(control_pb2.RegisterRequest(node=sent.node), timeout=5)
        with pytest.raises(grpc.RpcError) as refused:
            stub.Heartbeat(arrived, timeout=5, metadata=checksum_metadata(sent))
        assert refused.value.code() is grpc.StatusCode.DATA_LOSS
        assert "heartbeat of node 'n1' arrived corrupted" in refused.value.details()
        assert known_checkpoints(stub) == set()
        reply, call = stub.Heartbeat.with_call(sent, timeout=5, metadata=checksum_metadata(sent))
        assert arrived_intact(reply, call.trailing_metadata())
        assert dict(call.trailing_metadata())[CHECKSUM_KEY] == checksum(reply)
        assert known_checkpoints(stub) == {"/tmp/q/checkpoint/state/0/2"}


def test_a_message_without_a_checksum_is_taken_as_it_is_and_one_changed_is_not() -> None:
    message = heartbeat("/a")
    assert arrived_intact(message, None) and arrived_intact(message, [("other", "x")])
    assert arrived_intact(message, checksum_metadata(message))
    assert not arrived_intact(heartbeat("/b"), checksum_metadata(message))
