"""A driver process that ends exits promptly: our controller in it never holds it at interpreter exit.

The hang this guards against: the driver's controller serves gRPC calls on a thread pool, and the interpreter
shuts thread pools down before it runs `atexit` hooks; a state node's call arriving in between killed the server's
serving thread, and stopping the controller from `atexit` then waited forever for a confirmation that never came.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

HERE = Path(__file__).resolve().parent
EXIT_WITHIN_SECONDS = 10.0


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(HERE / "exiting_driver.py"), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=HERE.parent,
    )


def _line_starting(process: subprocess.Popen, prefix: str) -> str:
    for line in process.stdout:
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    raise AssertionError(f"no {prefix!r} line; stderr:\n{process.stderr.read()[-4000:]}")


def _seconds_to_exit(process: subprocess.Popen) -> float:
    """Seconds from the driver's `LAST` line to its exit (fails past EXIT_WITHIN_SECONDS, killing it)."""
    last = float(_line_starting(process, "LAST "))
    try:
        process.wait(timeout=EXIT_WITHIN_SECONDS + 5)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError(
            f"the driver still ran {EXIT_WITHIN_SECONDS + 5:.0f}s after its last line; stderr:\n"
            f"{process.stderr.read()[-4000:]}"
        ) from None
    return time.time() - last


def test_a_driver_exits_while_nodes_keep_calling_its_controller() -> None:
    driver = _start("controller")
    address = _line_starting(driver, "ADDRESS ")
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
    finally:
        calling.clear()
    assert driver.returncode == 0, driver.stderr.read()[-4000:]
    assert waited < EXIT_WITHIN_SECONDS


def test_a_pyspark_driver_that_never_calls_stop_exits(tmp_path: Path) -> None:
    driver = _start("spark", str(tmp_path))
    assert int(_line_starting(driver, "BATCHES ")) >= 3
    waited = _seconds_to_exit(driver)
    assert driver.returncode == 0, driver.stderr.read()[-4000:]
    assert waited < EXIT_WITHIN_SECONDS
