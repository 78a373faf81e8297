"""`statestore demo`: the project's main job (README's first command)."""

from __future__ import annotations

import argparse

from statestore import engine_demo


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Register `statestore demo`."""
    parser = subparsers.add_parser("demo", help="the main job: the engine end to end")
    parser.add_argument("--dir", type=engine_demo.Path, help="working directory (default: a temporary one)")
    parser.set_defaults(handler=engine_demo._run)
