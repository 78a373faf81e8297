"""`statestore status` (and move, drain, rebalance) without `--controller`: it finds the controller running on
this host in the registry each controller writes (readable by its user only), lists them when several run, and
says what to give when none does. (With `--spark-ui`: tests/test_spark_submit.py, against a real Spark UI.)"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from statestore.waiting import wait_for

SECRET = "registry-test-secret"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "STATESTORE_SECRET"}
    return {**env, "STATESTORE_HOME": str(home), **extra}


def _statestore(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "statestore.cli", *args], capture_output=True, text=True, env=_env(home), timeout=60
    )


@pytest.fixture
def start_controller(home: Path, tmp_path: Path) -> Iterator:
    started: list[subprocess.Popen] = []

    def start(name: str) -> tuple[subprocess.Popen, str]:
        port_file = tmp_path / f"{name}.port"
        process = subprocess.Popen(
            [sys.executable, "-m", "statestore.cli", "controller", "--listen", "127.0.0.1:0",
             "--port-file", str(port_file), "--application", name],
            env=_env(home, STATESTORE_SECRET=SECRET),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        started.append(process)
        wait_for(lambda: port_file.exists() or process.poll() is not None, 30, f"controller {name} serving")
        return process, f"127.0.0.1:{port_file.read_text().strip()}"

    yield start
    for process in started:
        process.kill()
        process.wait()


def test_status_without_a_controller_says_what_to_give(home: Path) -> None:
    shown = _statestore(home, "status")
    assert shown.returncode == 2
    assert "no statestore controller runs on this host" in shown.stderr
    assert "--controller HOST:PORT" in shown.stderr and "--spark-ui" in shown.stderr


def test_status_finds_the_one_controller_and_lists_several(home: Path, start_controller) -> None:
    first, first_address = start_controller("first-app")
    shown = _statestore(home, "status")  # no --controller, no secret given: both from the registry
    assert shown.returncode == 0, shown.stderr
    assert "replication factor q=1" in shown.stdout
    (registration,) = (home / "controllers").glob("*.json")
    assert stat.S_IMODE(registration.stat().st_mode) == 0o600
    assert stat.S_IMODE((home / "controllers").stat().st_mode) == 0o700

    second, second_address = start_controller("second-app")
    shown = _statestore(home, "status")
    assert shown.returncode == 2
    assert "2 statestore controllers run on this host" in shown.stderr
    assert first_address in shown.stderr and second_address in shown.stderr
    assert "first-app" in shown.stderr and "second-app" in shown.stderr
    assert SECRET not in shown.stderr
    chosen = _statestore(home, "status", "--controller", second_address)  # its secret from the registry
    assert chosen.returncode == 0, chosen.stderr

    first.send_signal(signal.SIGKILL)  # gone without unregistering: ignored, and its file removed
    first.wait()
    shown = _statestore(home, "status")
    assert shown.returncode == 0, shown.stderr
    assert len(list((home / "controllers").glob("*.json"))) == 1

    second.send_signal(signal.SIGTERM)  # a clean stop unregisters
    second.wait(timeout=30)
    assert not list((home / "controllers").glob("*.json"))


def test_a_registration_whose_tls_files_are_gone_is_named_not_a_traceback(home: Path, tmp_path: Path) -> None:
    """The controller registered the TLS files it serves with; they were deleted since (a certificate rotated
    away). `status` names the file and the registration, and fails like any bad input."""
    import json

    from statestore import tls

    (home / "controllers").mkdir(parents=True, mode=0o700)
    gone = tmp_path / "rotated-away.pem"
    registration = {"address": "127.0.0.1:1", "secret": SECRET, "pid": os.getpid(), "started": 1.0,
                    "tls": {tls.CERT_ENV: str(gone), tls.KEY_ENV: str(gone), tls.CA_ENV: str(gone)}}  # fmt: skip
    (home / "controllers" / f"{os.getpid()}.json").write_text(json.dumps(registration))
    shown = _statestore(home, "status")
    assert shown.returncode == 2, shown
    assert "Traceback" not in shown.stderr
    assert "registration of 127.0.0.1:1" in shown.stderr and str(gone) in shown.stderr
