"""`statestore build-jar`: write the provider jar for users who ship it to a cluster."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from spark_provider.jar import JarBuildError, provider_jar


def _build_jar(args: argparse.Namespace) -> int:
    try:
        built = provider_jar()
    except JarBuildError as e:
        print(f"statestore build-jar: {e}")
        return 1
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(built, out)
    print(f"wrote {out} ({out.stat().st_size} bytes); use it with spark.jars and "
          f"spark.sql.streaming.stateStore.providerClass=io.statestore.spark.StatestoreProvider")
    return 0


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Register `build-jar` on the `statestore` command line."""
    parser = subparsers.add_parser("build-jar", help="build the Spark provider jar")
    parser.add_argument("--out", required=True, help="where to write the jar")
    parser.set_defaults(handler=_build_jar)
