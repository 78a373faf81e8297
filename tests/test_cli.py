"""The `statestore` command line, run as a user runs it."""

from __future__ import annotations

import subprocess
import sys


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "statestore.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_engine_demo_restores_every_kept_version(tmp_path) -> None:
    result = run_cli("engine-demo", "--dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "all restored versions match" in result.stdout
    assert result.stdout.count("matches the model") == 6


def test_unknown_command_is_refused_with_usage() -> None:
    result = run_cli("no-such-command")
    assert result.returncode == 2
    assert "invalid choice: 'no-such-command'" in result.stderr
