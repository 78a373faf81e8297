"""Malformed and hostile local-channel frames (docs/formats.md section 6) against a real state node process: every
request gets exactly one answer of the right type on the same connection (a refusal naming what is wrong, never a
crash), the connection stays in step for the next request, the node stays up, and nothing is written for what it
refused: no replica adopted, no directory materialized, nothing under a path a frame named."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_node_harness import Cluster, wait_until

from statestore.node import local_channel as lc

FRAME_TYPES = [lc.COMMITTED, lc.MATERIALIZE, lc.PROMOTE, lc.DEMOTE, lc.RELEASED, lc.INCOMING, lc.LOAD]


class Node:
    """A controller and one node with a local socket. Its providers' directory is `providers`; frames name paths
    there and in `scratch`, outside it, which must never change."""

    def __init__(self, root: Path) -> None:
        self.cluster = Cluster(root, q=1)
        self.socket = root / "n.sock"
        self.providers = root / "providers"
        self.scratch = root / "scratch"
        for area in (self.providers, self.scratch):
            (area / "empty").mkdir(parents=True)
            (area / "file").write_bytes(b"not a store")
        self.conn: socket.socket | None = None

    def start(self) -> None:
        self.cluster.start_controller()
        self.cluster.start_node("n", "--local-socket", str(self.socket), "--provider-dir", str(self.providers))
        wait_until(self.socket.exists, 20, "the local socket")

    def connection(self) -> socket.socket:
        if self.conn is None:
            self.conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.conn.settimeout(30)
            self.conn.connect(str(self.socket))
        return self.conn

    def ask(self, whole_frame: bytes) -> tuple[int, bytes]:
        conn = self.connection()
        conn.sendall(whole_frame)
        answer = lc.read_frame(conn)
        assert answer is not None, "the node closed the connection instead of answering"
        return answer


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    running = Node(tmp_path_factory.mktemp("frames"))
    try:
        running.start()
        yield running
    finally:
        if running.conn is not None:
            running.conn.close()
        running.cluster.close()


# ------------------------------------------------------------------------------------------------- strategies

u8, u16, u32, u64 = (st.integers(0, 2**bits - 1) for bits in (8, 16, 32, 64))
texts = st.text(max_size=40) | st.sampled_from(["", "0/0/default", "../../etc", "a\x00b", "/", "file:///x%00y"])
lineages = st.none() | st.binary(min_size=16, max_size=16)


def paths(node: Node) -> st.SearchStrategy[str]:
    """Paths a frame may name: in the providers' directory or outside it (missing, an empty directory, a file,
    through `..`), the node's data dir, odd ones."""
    names = st.sampled_from(["missing", "empty", "file", "missing/deeper", "empty/new", "empty/../file"])
    areas = st.sampled_from([str(node.providers), str(node.scratch), str(node.scratch / "../providers/.."),
                             str(node.cluster.data_dir("n"))])  # fmt: skip
    odd = st.sampled_from(["", "/", "relative/dir", f"{node.scratch}/nul\x00byte", f"{node.providers}/.."])
    return st.builds(lambda area, name: f"{area}/{name}", areas, names) | odd | texts.map(
        lambda t: f"{node.scratch}/t-{t}"
    )


def structured(node: Node) -> st.SearchStrategy[bytes]:
    """Frames whose layout is right and whose values are anything the layout allows."""
    path = paths(node)
    return st.one_of(
        st.builds(lc.Committed, texts, texts, u64, st.booleans(), st.booleans(), st.binary(max_size=300)).map(
            lc.encode_committed
        ),
        st.builds(lc.Materialize, texts, texts, u64, path, st.booleans(), st.integers(0, 300)).map(
            lc.encode_materialize
        ),
        st.builds(
            lc.Promote, texts, texts, u64, lineages, st.sampled_from(sorted(lc.SOURCE_NAMES)), u64, u64, u32,
            texts, texts, texts, texts,
        ).map(lc.encode_promote),
        st.builds(lc.Demote, texts, texts, u64, lineages, path).map(lc.encode_demote),
        st.builds(lc.Released, texts, texts).map(lc.encode_released),
        st.builds(lc.Load, texts, texts, u64, u32, u64, u64, u16).map(lc.encode_load),
        st.just(lc.frame(lc.INCOMING, b"")),
    )


def damaged(node: Node) -> st.SearchStrategy[bytes]:
    """Well-framed requests whose fields are cut short, grown, flipped, or random, of known and unknown types."""

    def damage(whole: bytes, how: str, at: int, byte: int) -> bytes:
        frame_type, fields = whole[4], whole[5:]
        at %= len(fields) + 1
        if how == "cut":
            fields = fields[:at]
        elif how == "grow":
            fields = fields[:at] + bytes([byte]) + fields[at:]
        elif fields:
            fields = fields[: at % len(fields)] + bytes([fields[at % len(fields)] ^ (byte | 1)]) + fields[
                at % len(fields) + 1 :
            ]
        return lc.frame(frame_type, fields)

    random_fields = st.builds(
        lc.frame, st.sampled_from(FRAME_TYPES) | st.integers(0, 255), st.binary(max_size=200)
    )
    return random_fields | st.builds(damage, structured(node), st.sampled_from(["cut", "grow", "flip"]), u16, u8)


def expected_answer(request: bytes) -> int:
    frame_type = request[4]
    return lc.MATERIALIZED if frame_type == lc.MATERIALIZE else (
        lc.INCOMING_LIST if frame_type == lc.INCOMING and len(request) == 5 else lc.REPLY
    )


def check_answer(node: Node, request: bytes) -> None:
    frame_type, fields = node.ask(request)
    assert frame_type == expected_answer(request), (request[:40], frame_type, fields[:200])
    if frame_type == lc.REPLY:
        reply = lc.decode_reply(fields)
        assert reply.status in (lc.STATUS_ACCEPTED, lc.STATUS_REFUSED, lc.STATUS_NOT_REPLICATED), reply
        assert reply.status != lc.STATUS_REFUSED or reply.message, "a refusal must say why"
    elif frame_type == lc.MATERIALIZED:
        answer = lc.decode_materialized(fields)
        assert answer.status in (lc.MATERIALIZED_NONE, lc.MATERIALIZED_FAILED), answer  # it holds nothing
        assert answer.message, "no copy, and no reason given"
    else:
        lc.decode_incoming_list(fields)
    # Still in step: the next request on the same connection gets its own answer.
    probe = lc.encode_load(lc.Load("9/9/probe", "/probe", 1, 1, 1, 1, 1))
    assert node.ask(probe)[0] == lc.REPLY


# ------------------------------------------------------------------------------------------------------- tests

HYPOTHESIS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


def scratch_listing(node: Node) -> set[str]:
    """What is outside the providers' directory: the scratch directory and the node's data dir's top level."""
    data_dir = node.cluster.data_dir("n")
    return {str(p.relative_to(node.scratch)) for p in node.scratch.rglob("*")} | {
        p.name for p in data_dir.iterdir()
    }


@HYPOTHESIS
@given(data=st.data())
def test_every_well_laid_out_frame_is_answered_once_whatever_its_values(node: Node, data: st.DataObject) -> None:
    before = scratch_listing(node)
    check_answer(node, data.draw(structured(node)))
    assert scratch_listing(node) == before, "a refused frame wrote under a path it named"
    assert node.cluster.processes["n"].popen.poll() is None, node.cluster.processes["n"].log()[-3000:]


@HYPOTHESIS
@given(data=st.data())
def test_every_damaged_frame_is_refused_naming_what_is_wrong(node: Node, data: st.DataObject) -> None:
    before = scratch_listing(node)
    check_answer(node, data.draw(damaged(node)))
    assert scratch_listing(node) == before
    assert node.cluster.processes["n"].popen.poll() is None, node.cluster.processes["n"].log()[-3000:]


def test_a_frame_length_outside_the_bounds_is_refused_and_the_connection_closed(node: Node) -> None:
    for header in (struct.pack(">I", 0), struct.pack(">I", lc.MAX_FRAME_BYTES + 1)):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(30)
            conn.connect(str(node.socket))
            conn.sendall(header)
            frame_type, fields = lc.read_frame(conn) or (0, b"")
            assert frame_type == lc.REPLY and "bad frame: frame length" in lc.decode_reply(fields).message
            assert lc.read_frame(conn) is None  # framing is lost: closed, the provider reconnects


def test_the_node_logged_no_unhandled_error(node: Node) -> None:
    """Run last in this module: after every frame above, the node's log shows no traceback."""
    log = node.cluster.processes["n"].log()
    assert "Traceback" not in log, log[log.find("Traceback") - 2000 :][:6000]


def test_provider_paths_allow_only_entries_beneath_the_shared_directory(tmp_path: Path) -> None:
    from statestore.node.provider_paths import PathRefused, ProviderPaths

    shared, outside = tmp_path / "jvm", tmp_path / "elsewhere"
    (shared / "node-1").mkdir(parents=True)
    outside.mkdir()
    (shared / "link").symlink_to(outside)
    (shared / "dir-link").symlink_to(outside, target_is_directory=True)
    paths = ProviderPaths(shared, shared / "node-1")
    assert paths.checked(f"{shared}/0_1_default_x.from-node-y", "target_dir") == shared / "0_1_default_x.from-node-y"
    refusals = {
        f"{outside}/x": "is not beneath",
        f"{shared}/../elsewhere/x": "'..' component",
        f"{shared}/link": "is a symbolic link",
        f"{shared}/dir-link/x": "is not beneath",  # through a link, out of the shared directory
        # Lexically `{shared}/victim`; the kernel follows the link first, to a sibling of `outside`.
        f"{shared}/dir-link/../victim": "'..' component",
        f"{shared}/a/../0_1_default_x": "'..' component",
        f"{shared}/node-1": "the node's data dir",
        f"{shared}/node-1/replicas": "the node's data dir",
        str(shared): "is not beneath",
        "relative": "is not an absolute path",
        "": "is empty",
        f"{shared}/a\x00b": "NUL",
    }
    for named, why in refusals.items():
        with pytest.raises(PathRefused, match=why):
            paths.checked(named, "directory")
