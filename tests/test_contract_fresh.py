"""The Java/Python contract is written once: every generated file (both languages' frames and increment codes, and
docs/formats.md's tables) is what `protos/contract/*.toml` makes, so a change on one side only fails here."""

from __future__ import annotations

from typing import Any

import pytest

from statestore.contract import generate


def test_every_generated_file_is_what_its_spec_makes() -> None:
    stale = [str(p.relative_to(generate.PROJECT_ROOT)) for p in generate.stale_files()]
    assert stale == [], f"run `python -m statestore.contract.generate`: stale {stale}"


def _swap_two_fields(spec: dict[str, Any]) -> dict[str, Any]:
    frame = next(f for f in spec["frame"] if f["type"] == "LOAD")
    frame["fields"][3], frame["fields"][4] = frame["fields"][4], frame["fields"][3]
    return spec


def _drop_a_constant(spec: dict[str, Any]) -> dict[str, Any]:
    spec["op"]["MERGE"] = 7
    return spec


@pytest.mark.parametrize(
    ("spec_name", "change", "stale_expected"),
    [
        ("local_channel", _swap_two_fields, {"local_channel_frames.py", "FrameCodec.java", "formats.md"}),
        ("increment", _drop_a_constant, {"increment_layout.py", "IncrementLayout.java", "formats.md"}),
    ],
)
def test_a_change_to_a_spec_leaves_both_languages_stale_until_generated(
    monkeypatch: pytest.MonkeyPatch, spec_name: str, change: Any, stale_expected: set[str]
) -> None:
    """What the freshness test guards: the same change reaches the Python module, the Java class and the docs."""
    original = generate.load_spec
    monkeypatch.setattr(
        generate, "load_spec", lambda name: change(original(name)) if name == spec_name else original(name)
    )
    assert {p.name for p in generate.stale_files()} == stale_expected


def test_the_words_of_a_refusal_are_the_same_in_the_generated_java_and_the_python_kinds() -> None:
    from spark_provider.settings import BY_NAME

    for setting in generate.load_spec("provider_settings")["setting"]:
        assert generate.expected_text(setting) == BY_NAME[setting["name"]].kind.expected, setting["name"]
