"""Malformed and hostile gRPC requests against a real controller and a real state node (hypothesis over every
method's message layout, built from the .proto descriptors): each call ends with a reply or a status that says
what is wrong (never UNKNOWN, gRPC's code for an exception the server did not handle), undecodable bytes are
refused by gRPC itself, and afterwards both processes still serve: the node is alive in the controller's status
and the controller answers."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor as pb_descriptor
from google.protobuf import message as pb_message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_node_harness import Cluster

from statestore.rpc import common_pb2, control_pb2, replication_pb2

FD = pb_descriptor.FieldDescriptor
# What a refusal may say. UNKNOWN means the server raised; INTERNAL is gRPC's own word for bytes it cannot decode.
REFUSALS = {
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.DATA_LOSS,
    grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
}  # fmt: skip
SERVICES = [
    control_pb2.DESCRIPTOR.services_by_name["Control"],
    replication_pb2.DESCRIPTOR.services_by_name["Replication"],
    replication_pb2.DESCRIPTOR.services_by_name["Primary"],
]
MODULES = {d.name: d for d in (common_pb2.DESCRIPTOR, control_pb2.DESCRIPTOR, replication_pb2.DESCRIPTOR)}
# Calls that would stop the cluster under test rather than probe it: a drain of its only node keeps it out of
# every plan from then on (a legitimate command, tested in test_handover_units).
SKIPPED = {"Drain"}


def message_class(descriptor: pb_descriptor.Descriptor) -> type[pb_message.Message]:
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(descriptor)


def scalars(field: pb_descriptor.FieldDescriptor) -> st.SearchStrategy[Any]:
    edges = st.sampled_from([0, 1, -1, 2**31 - 1, 2**63 - 1, -(2**63)])
    by_type = {
        FD.TYPE_INT64: st.integers(-(2**63), 2**63 - 1) | edges,
        FD.TYPE_SINT64: st.integers(-(2**63), 2**63 - 1),
        FD.TYPE_UINT64: st.integers(0, 2**64 - 1),
        FD.TYPE_INT32: st.integers(-(2**31), 2**31 - 1),
        FD.TYPE_UINT32: st.integers(0, 2**32 - 1),
        FD.TYPE_BOOL: st.booleans(),
        FD.TYPE_DOUBLE: st.floats(allow_nan=True, allow_infinity=True),
        FD.TYPE_FLOAT: st.floats(width=32, allow_nan=True, allow_infinity=True),
        FD.TYPE_STRING: st.text(max_size=30)
        | st.sampled_from(["", "0/0/default", "127.0.0.1:1", "../../etc", "a\x00b", "/tmp", "dry-run", "batched"]),
        FD.TYPE_BYTES: st.binary(max_size=120),
    }
    if field.type == FD.TYPE_ENUM:
        return st.sampled_from([v.number for v in field.enum_type.values]) | st.integers(-3, 50)
    return by_type[field.type]


def messages(descriptor: pb_descriptor.Descriptor, depth: int = 0) -> st.SearchStrategy[pb_message.Message]:
    """Any message of this layout: each field absent or set to any value of its type (nested ones to depth 3)."""
    cls = message_class(descriptor)

    def value_of(field: pb_descriptor.FieldDescriptor) -> st.SearchStrategy[Any]:
        if field.type == FD.TYPE_MESSAGE:
            if depth >= 3:
                return st.just(message_class(field.message_type)())
            return messages(field.message_type, depth + 1)
        return scalars(field)

    def build(values: dict[str, Any]) -> pb_message.Message:
        made = cls()
        for name, value in values.items():
            field = descriptor.fields_by_name[name]
            if field.is_repeated:
                getattr(made, name).extend(value)
            elif field.type == FD.TYPE_MESSAGE:
                getattr(made, name).CopyFrom(value)
            else:
                setattr(made, name, value)
        return made

    fields = {}
    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            continue  # no map fields in our protos today
        value = value_of(field)
        if field.is_repeated:
            value = st.lists(value, max_size=3 if depth < 2 else 1)
        fields[field.name] = value
    return st.fixed_dictionaries({}, optional=fields).map(build)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("grpc"), q=1, dead_after=30.0)
    try:
        running.start_controller()
        running.start_node("n")
        running.wait_groups(1)
        yield running
    except BaseException:
        print(running.logs())
        raise
    finally:
        running.close()


def target(cluster: Cluster, service: pb_descriptor.ServiceDescriptor) -> str:
    return cluster.controller_address if service.name == "Control" else cluster.addresses["n"]


def call(channel: grpc.Channel, service: pb_descriptor.ServiceDescriptor, method: pb_descriptor.MethodDescriptor,
         request: bytes | pb_message.Message) -> None:  # fmt: skip
    """Call `method` with `request` (a message, or raw bytes sent as they are) and read at most 3 answers."""
    path = f"/{service.full_name}/{method.name}"
    serialize = (lambda raw: raw) if isinstance(request, bytes) else (lambda m: m.SerializeToString())
    deserialize = message_class(method.output_type).FromString
    if method.client_streaming:
        stream = channel.stream_stream(path, request_serializer=serialize, response_deserializer=deserialize)
        responses = stream(iter([request, request]), timeout=10)
        list(itertools.islice(responses, 3))
    elif method.server_streaming:
        responses = channel.unary_stream(path, request_serializer=serialize, response_deserializer=deserialize)(
            request, timeout=10
        )
        list(itertools.islice(responses, 3))
    else:
        channel.unary_unary(path, request_serializer=serialize, response_deserializer=deserialize)(request, timeout=10)


METHODS = [(s, m) for s in SERVICES for m in s.methods if m.name not in SKIPPED]
HYPOTHESIS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize(("service", "method"), METHODS, ids=[f"{s.name}.{m.name}" for s, m in METHODS])
def test_any_request_of_the_layout_is_answered_or_refused_with_a_reason(cluster: Cluster, service, method) -> None:
    @HYPOTHESIS
    @given(request=messages(method.input_type) | st.binary(max_size=80))
    def probe(request: pb_message.Message | bytes) -> None:
        with grpc.insecure_channel(target(cluster, service)) as channel:
            try:
                call(channel, service, method, request)
            except grpc.RpcError as error:
                code = error.code()
                if isinstance(request, bytes) and code == grpc.StatusCode.INTERNAL:
                    return  # gRPC refused bytes that do not decode as the request's layout
                assert code in REFUSALS, (code, error.details(), request)
                assert error.details(), f"{code} without a reason"

    probe()
    for name, process in cluster.processes.items():
        assert process.popen.poll() is None, f"{name} exited:\n{process.log()[-4000:]}"


def test_after_every_probe_the_node_is_alive_and_the_controller_answers(cluster: Cluster) -> None:
    """Last in this module: the controller still has the node alive (its heartbeats went on) and serves."""
    status = cluster.status()
    assert any(n.node.node_id == "n" and n.alive for n in status.nodes), status.nodes
    for name, process in cluster.processes.items():
        assert "Exception calling application" not in process.log(), f"{name} raised in a handler"


def test_the_probes_cover_every_method_but_the_skipped() -> None:
    probed = {(s.full_name, m.name) for s, m in METHODS}
    served = {(s.full_name, m.name) for d in MODULES.values() for s in d.services_by_name.values() for m in s.methods}
    assert served - probed == {("statestore.rpc.Control", name) for name in SKIPPED}
