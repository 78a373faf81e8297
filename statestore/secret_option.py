"""Where a process finds the application's secret (statestore.auth): the environment, or a file named on a
command line. No gRPC here: the CLI's parsers use it without loading gRPC."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

SECRET_ENV = "STATESTORE_SECRET"


def secret_from_env() -> str:
    """The secret this process was given in its environment ("" when none)."""
    return os.environ.get(SECRET_ENV, "")


def secret_from_file(path: str | os.PathLike[str] | None) -> str:
    """The secret in file `path` (surrounding whitespace dropped), or the environment's when `path` is None.
    Raises ValueError naming the file when it cannot be read or is empty."""
    if path is None:
        return secret_from_env()
    try:
        secret = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ValueError(f"secret file {path}: {exc.strerror or exc}") from None
    if not secret:
        raise ValueError(f"secret file {path} is empty")
    return secret


def add_secret_argument(parser: argparse.ArgumentParser) -> None:
    """`--secret-file PATH` on a command that calls a controller (argparse)."""
    parser.add_argument(
        "--secret-file",
        metavar="PATH",
        help=f"file holding the application's secret (default: the {SECRET_ENV} environment variable; "
        "a notebook shows it with spark.conf.get('spark.sql.streaming.stateStore.statestore.secret'))",
    )
