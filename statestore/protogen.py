"""Generate the Python protobuf and gRPC modules from `protos/`, the single source of truth.

The generated modules are committed under `statestore/rpc/` so that running the project needs no code
generator; `tests/test_protos_fresh.py` regenerates them into a temporary directory and fails when the
committed ones are stale.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = PROJECT_ROOT / "protos"


def proto_files() -> list[Path]:
    """All .proto files under `protos/`, sorted."""
    return sorted(PROTO_ROOT.rglob("*.proto"))


def generate(out_dir: Path) -> list[Path]:
    """Run protoc (from grpcio-tools) on every proto file, writing modules under `out_dir`.

    Returns the generated files, relative to `out_dir`.
    """
    import grpc_tools
    from grpc_tools import protoc  # test/dev dependency only

    include = Path(grpc_tools.__file__).parent / "_proto"
    files = proto_files()
    if not files:
        raise RuntimeError(f"no .proto files under {PROTO_ROOT}")
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *[str(f) for f in files],
    ]
    code = protoc.main(args)
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code}: {' '.join(args)}")
    return sorted(p.relative_to(out_dir) for p in out_dir.rglob("*") if p.is_file())


def regenerate_in_place() -> list[Path]:
    """Regenerate the committed modules in the project tree; returns the files written."""
    with tempfile.TemporaryDirectory() as tmp:
        generated = generate(Path(tmp))
        for rel in generated:
            target = PROJECT_ROOT / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(tmp) / rel, target)
    return generated


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Register `statestore gen-protos`."""
    parser = subparsers.add_parser("gen-protos", help="regenerate statestore/rpc/ from protos/")
    parser.set_defaults(handler=lambda _args: _run())


def _run() -> int:
    for rel in regenerate_in_place():
        print(f"wrote {rel}")
    return 0
