"""The committed gRPC/protobuf modules must be exactly what `protos/` generates."""

from __future__ import annotations

from pathlib import Path

from statestore import protogen


def test_generated_modules_match_the_protos(tmp_path: Path) -> None:
    generated = protogen.generate(tmp_path)
    assert generated, "no modules generated"
    stale = [
        str(rel)
        for rel in generated
        if not (protogen.PROJECT_ROOT / rel).exists()
        or (protogen.PROJECT_ROOT / rel).read_bytes() != (tmp_path / rel).read_bytes()
    ]
    assert not stale, f"stale generated code, run `statestore gen-protos`: {stale}"


def test_generated_modules_import() -> None:
    from statestore.rpc import common_pb2

    blob = common_pb2.IncrementBlob(version=3, base_version=2, data=b"x")
    assert common_pb2.IncrementBlob.FromString(blob.SerializeToString()).version == 3
