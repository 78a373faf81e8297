"""A driver process that ends exits promptly, and the controller it started ends with it.

The controller runs as a sidecar of the driver's JVM (the plugin's driver side), watching its parent's pid. The
hang this guarded against when it ran inside the driver's Python: the controller serves gRPC calls on a thread
pool, and the interpreter shuts thread pools down before it runs `atexit` hooks; a state node's call arriving in
between killed the server's serving thread, and stopping the controller then waited forever for a confirmation
that never came. Its stop is bounded since (`Controller.stop`), which the sidecar's exit relies on too.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from statestore.waiting import wait_for

HERE = Path(__file__).resolve().parent
EXIT_WITHIN_SECONDS = 10.0


def _start(*args: str) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, str(HERE / "exiting_driver.py"), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,  # drained by a thread (a full pipe would hold the JVM, which writes there too)
        text=True,
        cwd=HERE.parent,
    )
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True).start()
    _stderr_lines[process.pid] = lines
    return process


_stderr_lines: dict[int, list[str]] = {}


def _stderr(process: subprocess.Popen) -> str:
    """The last of what `process` (and the JVM it started) wrote to stderr."""
    return "".join(_stderr_lines.get(process.pid, []))[-4000:]


def _line_starting(process: subprocess.Popen, prefix: str) -> str:
    for line in process.stdout:
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    raise AssertionError(f"no {prefix!r} line; stderr:\n{_stderr(process)}")


def _seconds_to_exit(process: subprocess.Popen) -> float:
    """Seconds from the driver's `LAST` line to its exit (fails past EXIT_WITHIN_SECONDS, killing it)."""
    last = float(_line_starting(process, "LAST "))
    try:
        process.wait(timeout=EXIT_WITHIN_SECONDS + 5)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError(
            f"the driver still ran {EXIT_WITHIN_SECONDS + 5:.0f}s after its last line; stderr:\n"
            f"{_stderr(process)}"
        ) from None
    return time.time() - last


def test_a_driver_exits_while_nodes_keep_calling_its_controller() -> None:
    driver = _start("controller")
    address = _line_starting(driver, "ADDRESS ")
    controller = int(_line_starting(driver, "CONTROLLER "))
    calling = threading.Event()
    calls = [0]

    def call_repeatedly() -> None:  # as state nodes do with heartbeats, only far more often
        with grpc.insecure_channel(address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            while calling.is_set():
                try:
                    health.Check(health_pb2.HealthCheckRequest(), timeout=0.5)
                    calls[0] += 1
                except grpc.RpcError:
                    pass

    calling.set()
    callers = [threading.Thread(target=call_repeatedly, daemon=True) for _ in range(4)]
    for caller in callers:
        caller.start()
    try:
        while calls[0] < 50:  # the calls are being served before the driver ends
            time.sleep(0.01)
        driver.stdin.close()  # the driver's last line runs while calls keep coming
        waited = _seconds_to_exit(driver)
        assert driver.returncode == 0, _stderr(driver)
        assert waited < EXIT_WITHIN_SECONDS
        # The controller, still called, notices its parent is gone and stops.
        wait_for(lambda: not _running(controller), EXIT_WITHIN_SECONDS, f"controller {controller} to exit")
    finally:
        calling.clear()


def test_a_pyspark_driver_that_never_calls_stop_exits(tmp_path: Path) -> None:
    driver = _start("spark", str(tmp_path))
    jvm = int(_line_starting(driver, "JVM "))
    controllers = _controllers_of(jvm)
    assert len(controllers) == 1, controllers  # the plugin's driver side started one
    assert int(_line_starting(driver, "BATCHES ")) >= 3
    waited = _seconds_to_exit(driver)
    assert driver.returncode == 0, _stderr(driver)
    assert waited < EXIT_WITHIN_SECONDS
    # Nothing of ours outlives the driver: its JVM's controller is gone too.
    wait_for(lambda: not any(_running(pid) for pid in controllers), EXIT_WITHIN_SECONDS, "the controller to exit")


def test_enable_on_a_running_session_starts_a_controller_that_stops_with_its_context(tmp_path: Path) -> None:
    driver = _start("attach", str(tmp_path))
    try:
        jvm = int(_line_starting(driver, "JVM "))
        controllers = _controllers_of(jvm)
        assert len(controllers) == 1, controllers
        # The controller served the query's partitions (two, with their replicas' groups), reached through the
        # session's confs and the secret from this host's registry.
        assert int(_line_starting(driver, "PARTITIONS ")) == 2
        driver.stdin.write("stop\n")
        driver.stdin.flush()
        _line_starting(driver, "STOPPED")
        # The driver's Python and JVM live on; the controller ended with the SparkContext.
        wait_for(lambda: not _running(controllers[0]), EXIT_WITHIN_SECONDS, "the controller to stop with Spark")
        assert driver.poll() is None and _running(jvm)
    finally:
        driver.kill()
        driver.wait()


def _running(pid: int) -> bool:
    """Whether process `pid` runs (a zombie waiting for its reaper does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _controllers_of(jvm: int) -> list[int]:
    """Pids of the controllers the driver JVM `jvm` started (their `--parent-pid` names it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        parent = argv[argv.index(b"--parent-pid") + 1] if b"--parent-pid" in argv else b""
        if b"controller" in argv and parent == str(jvm).encode():
            found.append(int(entry.name))
    return found
