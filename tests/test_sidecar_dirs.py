"""Where an executor's state node sidecar keeps its data and socket (docs/formats.md section 6), checked on
the provider's own Java code without Spark: spark_provider/java_test/io/statestore/spark/SidecarDirsCheck.java,
one JVM per call, plays executors starting and dying.

- Each JVM's sidecar data dir is `<localDir>/<pid>-<uuid>/node-<executorId>`: two JVMs with the same
  executor id (two applications, or two runs, on one local dir) never share it, and a dead JVM's is deleted
  when the next JVM on that local dir starts.
- A socket path over 106 bytes (the JDK refuses 107 where Linux binds it) falls back to a short one in
  java.io.tmpdir (then /tmp).
- A sidecar restarted for another controller (a new application in a `local`-mode JVM) starts on an empty
  data dir, here with a real node on the fallback socket."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_replica_groups_spark_harness import process_argv, wait_until

from spark_provider.jar import provider_jar, pyspark_jars_dir
from statestore.node.local_channel import MAX_SOCKET_PATH_BYTES  # the node's limit, which the provider keeps to

DRIVER = Path(__file__).resolve().parents[1] / "spark_provider" / "java_test" / "io" / "statestore" / "spark"

pytestmark = pytest.mark.skipif(shutil.which("javac") is None or shutil.which("java") is None, reason="needs a JDK")


@dataclass
class Java:
    """Runs SidecarDirsCheck in a JVM of its own."""

    classpath: str
    tmpdir: Path

    def argv(self, *args: str, tmpdir: Path | None = None) -> list[str]:
        return [
            "java",
            "-Xmx256m",
            f"-Djava.io.tmpdir={tmpdir or self.tmpdir}",
            "-cp",
            self.classpath,
            "io.statestore.spark.SidecarDirsCheck",
            *args,
        ]

    def run(self, *args: str, tmpdir: Path | None = None) -> dict[str, list[str]]:
        result = subprocess.run(self.argv(*args, tmpdir=tmpdir), capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr[-4000:]
        return parse(result.stdout.splitlines())

    def start(self, *args: str) -> subprocess.Popen:
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
        return subprocess.Popen(
            self.argv(*args), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )


def parse(lines: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in lines:
        key, _, value = line.partition("=")
        out.setdefault(key, []).append(value)
    return out


def read_until(process: subprocess.Popen, key: str) -> dict[str, list[str]]:
    """The `key=value` lines the JVM printed up to and including `key`."""
    assert process.stdout is not None
    lines = []
    while True:
        line = process.stdout.readline()
        if not line:
            assert process.stderr is not None
            raise AssertionError(f"the JVM ended before printing {key}: {process.stderr.read()[-4000:]}")
        lines.append(line.rstrip("\n"))
        if line.startswith(f"{key}="):
            return parse(lines)


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> Java:
    tmp = tmp_path_factory.mktemp("sidecar-java")
    classes = tmp / "classes"
    classes.mkdir()
    classpath = f"{provider_jar()}:{pyspark_jars_dir() / '*'}"
    subprocess.run(
        [
            "javac",
            "--release",
            "17",
            "-nowarn",
            "-cp",
            classpath,
            "-d",
            str(classes),
            str(DRIVER / "SidecarDirsCheck.java"),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    short_tmp = tmp / "t"
    short_tmp.mkdir()
    return Java(f"{classes}:{classpath}", short_tmp)


def _jvm_dir_of(data_dir: Path, root: Path, pid: int, executor_id: str) -> Path:
    """Checks `data_dir` is `root/<pid>-<uuid>/node-<executor_id>`; returns its JVM directory."""
    assert data_dir.name == f"node-{executor_id}"
    assert data_dir.parent.parent == root
    assert re.fullmatch(rf"{pid}-[0-9a-f-]{{36}}", data_dir.parent.name), data_dir
    return data_dir.parent


def test_jvms_never_share_a_node_dir_and_a_dead_ones_is_deleted_at_the_next_start(java: Java, tmp_path: Path) -> None:
    root = tmp_path / "local"
    # Executor 0 of a first application, alive while a second application's executor 0 starts on the same dir.
    first = java.start("dirs", str(root), "0", "hold")
    try:
        a = read_until(first, "ready")
        b = java.run("dirs", str(root), "0")
        dir_a, dir_b = Path(a["dataDir"][0]), Path(b["dataDir"][0])
        jvm_a = _jvm_dir_of(dir_a, root, first.pid, "0")
        jvm_b = _jvm_dir_of(dir_b, root, int(b["pid"][0]), "0")
        assert jvm_a != jvm_b
        assert a["socket"] != b["socket"]
        # The live JVM's directory survived the other's start-up; the one that exited is left for the next.
        assert (dir_a / "replicas" / "marker").read_text() == f"of JVM {first.pid}"
        assert (dir_b / "replicas" / "marker").exists()
    finally:
        assert first.stdin is not None
        first.stdin.close()
        first.wait(timeout=30)
    # Both JVMs are gone: the next one to start on this local dir deletes their directories, node dirs included.
    c = java.run("dirs", str(root), "0")
    dir_c = Path(c["dataDir"][0])
    assert not jvm_a.exists() and not jvm_b.exists()
    assert (dir_c / "replicas" / "marker").exists()
    assert sorted(p.name for p in root.iterdir()) == [dir_c.parent.name]


def test_a_socket_path_the_jdk_cannot_reach_falls_back_to_a_short_one(java: Java, tmp_path: Path) -> None:
    short = tmp_path / "local" / "123-x" / "node-0"
    long = tmp_path / ("l" * 80) / "123-x" / "node-0"
    other = tmp_path / ("l" * 80) / "123-x" / "node-1"
    out = java.run("socket", str(short), str(long), str(long), str(other))
    pid = out["pid"][0]
    sockets = [Path(s) for s in out["socket"]]
    assert sockets[0] == short / "node.sock"
    assert len(os.fsencode(long / "node.sock")) > MAX_SOCKET_PATH_BYTES
    assert sockets[1].parent == java.tmpdir
    assert re.fullmatch(rf"statestore-{pid}-[0-9a-f]{{8}}\.sock", sockets[1].name)
    assert sockets[1] == sockets[2] and sockets[1] != sockets[3]  # the same for a data dir, not between them
    assert all(len(os.fsencode(s)) <= MAX_SOCKET_PATH_BYTES for s in sockets)
    # Exactly 107 bytes: Linux binds it, the JDK cannot connect to it (found by the replication bench).
    exact = (
        tmp_path
        / ("e" * (107 - len(os.fsencode(tmp_path / "123-x" / "node-0" / "node.sock")) - 1))
        / "123-x"
        / "node-0"
    )
    assert len(os.fsencode(exact / "node.sock")) == 107
    assert Path(java.run("socket", str(exact))["socket"][0]).parent == java.tmpdir
    # java.io.tmpdir too long as well: /tmp.
    long_tmp = tmp_path / ("t" * 100)
    out = java.run("socket", str(long), tmpdir=long_tmp)
    assert Path(out["socket"][0]).parent == Path("/tmp")


def _sidecar(data_dir: Path) -> tuple[int, list[str]] | None:
    """(pid, argv) of the live node process started with `--data-dir data_dir`, found in /proc."""
    for entry in Path("/proc").iterdir():
        argv = process_argv(int(entry.name)) if entry.name.isdigit() else None
        if argv and "--data-dir" in argv and argv[argv.index("--data-dir") + 1] == str(data_dir):
            return int(entry.name), argv
    return None


def _gone(pid: int) -> bool:
    return process_argv(pid) is None


@pytest.fixture
def restart_jvm(java: Java, tmp_path: Path) -> Iterator[tuple[subprocess.Popen, Path]]:
    # A local dir long enough that the socket falls back to java.io.tmpdir, as it may on a real executor.
    root = tmp_path / ("l" * 60)
    process = java.start("restart", str(root), "127.0.0.1:9", "127.0.0.1:10")
    try:
        yield process, root
    finally:
        if process.poll() is None:
            assert process.stdin is not None
            process.stdin.close()
            process.wait(timeout=30)


def test_a_sidecar_for_another_controller_starts_on_an_empty_data_dir(
    restart_jvm: tuple[subprocess.Popen, Path], java: Java
) -> None:
    process, root = restart_jvm
    assert process.stdin is not None
    first = read_until(process, "first")
    data_dir, sock, planted = Path(first["dataDir"][0]), Path(first["socket"][0]), Path(first["planted"][0])
    _jvm_dir_of(data_dir, root, process.pid, "driver")
    assert sock.parent == java.tmpdir and len(os.fsencode(sock)) <= MAX_SOCKET_PATH_BYTES
    found = _sidecar(data_dir)
    assert found is not None, "no sidecar for controller A"
    old_pid, argv = found
    assert argv[argv.index("--controller") + 1] == "127.0.0.1:9"
    assert argv[argv.index("--local-socket") + 1] == str(sock)
    assert argv[argv.index("--parent-pid") + 1] == str(process.pid)
    assert planted.exists() and sock.exists()

    process.stdin.write("go\n")
    process.stdin.flush()
    read_until(process, "second")
    found = _sidecar(data_dir)
    assert found is not None, "no sidecar for controller B"
    new_pid, argv = found
    assert new_pid != old_pid and _gone(old_pid)
    assert argv[argv.index("--controller") + 1] == "127.0.0.1:10"
    assert not planted.exists() and not planted.parent.exists(), "application A's replica was left for B's node"
    # The old node's log went with its data: the log holds one start, B's.
    events = [json.loads(line) for line in (data_dir / "node.log").read_text().splitlines() if line.startswith("{")]
    assert [e["controller"] for e in events if e["event"] == "listening"] == ["127.0.0.1:10"]

    process.stdin.close()
    assert process.wait(timeout=30) == 0
    wait_until(lambda: _gone(new_pid), 15, "the sidecar to exit with its JVM")
    assert not sock.exists()  # it exited gracefully, removing its socket
