"""The package carries one prebuilt provider jar per supported Spark line, built from the sources it carries, so
`enable()` needs no JDK; a Java source changed without `statestore build-jar --refresh-packaged` fails here."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spark_provider import jar


@pytest.mark.parametrize("line", sorted(jar.SPARK_LINES))
def test_each_line_has_a_prebuilt_jar_of_the_current_sources(line: str) -> None:
    path = jar.packaged_jar_path(line)
    assert path.exists(), f"no prebuilt jar for Spark {line}: run `statestore build-jar --refresh-packaged`"
    attributes = jar.manifest_attributes(path)
    assert attributes["Statestore-Sources-SHA256"] == jar.sources_hash(line), (
        f"the Spark {line} jar was built from other sources: run `statestore build-jar --refresh-packaged`"
    )
    assert attributes["Statestore-Built-Against-Spark"] == jar.LINE_RELEASES[line]


def test_the_installed_line_uses_its_prebuilt_jar_without_compiling(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_javac(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("compiled although a prebuilt jar of these sources exists")

    monkeypatch.setattr(jar, "build_jar", no_javac)
    assert jar.provider_jar() == jar.packaged_jar_path(jar.installed_line())


def test_sources_that_differ_from_the_prebuilt_jar_are_compiled(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    built = []
    monkeypatch.setattr(jar, "sources_hash", lambda line=None: "edited-" + (line or jar.installed_line()))
    monkeypatch.setattr(jar, "build_jar", lambda out, *a, **k: built.append(out) or out)
    path = jar.provider_jar(cache_dir=tmp_path)
    assert built == [path] and path.parent == tmp_path


def test_an_unsupported_spark_line_is_refused_naming_the_supported_ones() -> None:
    with pytest.raises(jar.JarBuildError, match=r"pyspark 3\.4\.4 is not supported.*3\.5, 4\.0, 4\.1, 4\.2, 4\.3"):
        jar.spark_line("3.4.4")
    done = subprocess.run(
        [sys.executable, "-m", "statestore.cli", "build-jar", "--spark", "9.9", "--out", "/tmp/x.jar"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 1 and "supported lines are 3.5, 4.0, 4.1, 4.2, 4.3" in done.stdout


def test_build_jar_lists_the_lines_and_writes_another_lines_prebuilt_jar(tmp_path) -> None:
    listing = subprocess.run([sys.executable, "-m", "statestore.cli", "build-jar", "--list"], capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
    for line in jar.SPARK_LINES:
        assert f"Spark {line}: prebuilt against Spark {jar.LINE_RELEASES[line]}" in listing
    out = tmp_path / "provider-4.0.jar"
    subprocess.run([sys.executable, "-m", "statestore.cli", "build-jar", "--spark", "4.0", "--out", str(out)],
                   capture_output=True, text=True, check=True)  # fmt: skip
    assert jar.manifest_attributes(out)["Statestore-Built-Against-Spark"] == "4.0.5"
