"""Every setting of ours refuses a bad value with an error naming the setting, the value and what is allowed: as an
`enable()` keyword, as a Spark conf the builder already has, and in the provider (Java) with the same words."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_provider import SettingError, enable
from spark_provider.jar import provider_jar, pyspark_jars_dir
from spark_provider.setting_values import Address, Choice, Flag, Integer, Number, Text
from spark_provider.settings import BY_NAME, PREFIX, SETTINGS, spark_confs
from statestore.contract.generate import load_spec

DRIVER = Path(__file__).resolve().parents[1] / "spark_provider" / "java_test" / "io" / "statestore" / "spark"
# The confs the Java provider reads (ProviderSettings.java, from SettingsTable.java); the others are the driver's
# controller's or Spark's.
JAVA_READS = {s["name"] for s in load_spec("provider_settings")["setting"] if s.get("java")}
# Bad conf strings for each kind of value, and good ones with the conf string they become.
BAD = {
    Choice: ["lz4", "", "zstd,none"],
    Flag: ["yes", "1", ""],
    Integer: ["abc", "1.5", "", "-1", "99999999999999999999999", "1_000", "+-5"],
    Number: ["abc", "nan", "inf", "-1", "0", "", "1_000", "+-5"],
    Address: ["nohost", "host:", "host:0", "host:70000", ":80"],
}


def bad_values(kind) -> list[str]:
    """The bad conf strings of a setting's kind (0 is good where a number may be 0)."""
    return [raw for raw in BAD[type(kind)] if not (raw == "0" and getattr(kind, "inclusive", False))]


GOOD = {Flag: [("True", "true"), ("false", "false")], Address: [("127.0.0.1:7077", "127.0.0.1:7077")]}


def builder():
    from pyspark.sql import SparkSession

    return SparkSession.builder.master("local[1]")


# ------------------------------------------------------------------------------------------ the cases


def test_a_compression_that_is_not_offered_is_refused_naming_the_setting() -> None:
    with pytest.raises(SettingError) as refused:
        enable(builder(), increment_compression="lz4")
    assert str(refused.value) == (
        f"statestore setting increment_compression ({PREFIX}incrementCompression) is 'lz4': "
        "expected one of zstd, none"
    )


def test_a_negative_replication_factor_is_refused_before_any_conf_is_set() -> None:
    configured = builder()
    with pytest.raises(SettingError, match=r"replication_factor \(.*replicationFactor\) is -1: expected an integer"):
        enable(configured, replication_factor=-1)
    assert not any(key.startswith(PREFIX) or key == "spark.plugins" for key in configured._options)


def test_a_replication_factor_that_is_not_a_number_is_refused_naming_it_as_keyword_and_as_conf() -> None:
    with pytest.raises(SettingError, match=r"replication_factor .* is 'abc': expected an integer of at least 0"):
        enable(builder(), replication_factor="abc")
    configured = builder().config(PREFIX + "replicationFactor", "abc")
    with pytest.raises(SettingError) as refused:
        enable(configured)
    assert str(refused.value) == (
        f"statestore setting {PREFIX}replicationFactor is 'abc': expected an integer of at least 0"
    )


def test_a_misspelt_key_under_our_prefix_is_refused_listing_the_known_ones() -> None:
    with pytest.raises(SettingError, match=r"unknown statestore setting .*replicationFactr .*: .*replicationFactor"):
        enable(builder().config(PREFIX + "replicationFactr", "2"))
    with pytest.raises(TypeError, match="unknown statestore setting"):
        spark_confs(replication_factr=2)


def test_a_conf_the_builder_has_is_kept_unless_a_keyword_overrides_it() -> None:
    existing = {PREFIX + "peerFetch": "Never", PREFIX + "zstdLevel": "3"}
    confs = spark_confs(existing, zstd_level=5)
    assert confs[PREFIX + "peerFetch"] == "never"  # kept (checked, in the case the provider reads)
    assert confs[PREFIX + "zstdLevel"] == "5"  # the keyword wins
    assert confs[PREFIX + "replicationFactor"] == "1"  # the default


# ------------------------------------------------------------------------------------- every setting, by kind


@pytest.mark.parametrize("setting", [s for s in SETTINGS if type(s.kind) in BAD], ids=lambda s: s.name)
def test_every_setting_refuses_each_bad_value_and_keeps_its_default(setting) -> None:
    for raw in bad_values(setting.kind):
        with pytest.raises(SettingError) as refused:
            spark_confs({setting.key: raw})
        assert str(refused.value) == f"statestore setting {setting.key} is {raw!r}: expected {setting.kind.expected}"
    if setting.default is not None:
        assert setting.conf(setting.default) == setting.default
        assert spark_confs({setting.key: setting.default})[setting.key] == setting.default


def test_keyword_values_of_python_types_become_the_confs_the_provider_reads() -> None:
    confs = spark_confs(sync=True, open_ahead=False, zstd_level=3, warm_up_mb_per_second=12.5, local_dir=Path("/x"))
    assert (confs[PREFIX + "sync"], confs[PREFIX + "openAhead"]) == ("true", "false")
    assert (confs[PREFIX + "zstdLevel"], confs[PREFIX + "warmUpMBPerSecond"]) == ("3", "12.5")
    assert confs[PREFIX + "localDir"] == "/x"
    for name, value in [("sync", 1), ("zstd_level", True), ("zstd_level", 2.0), ("local_dir", 3), ("controller", 7)]:
        with pytest.raises(SettingError, match=rf"statestore setting {name} \("):
            spark_confs(**{name: value})
    assert isinstance(BY_NAME["local_dir"].kind, Text)


@settings(max_examples=200, deadline=None)
@given(st.integers(-5, 30) | st.text(max_size=6))
def test_the_zstd_level_accepts_exactly_the_integers_from_1_to_22(value) -> None:
    setting = BY_NAME["zstd_level"]
    as_text = str(value).strip()
    valid = as_text.lstrip("+-").isdigit() and as_text.isascii() and 1 <= int(as_text) <= 22
    if valid:
        assert setting.conf(value) == str(int(as_text))
    else:
        with pytest.raises(SettingError, match="expected an integer from 1 to 22"):
            setting.conf(value)


# ------------------------------------------------------------------------------- the provider, with the same words


@pytest.fixture(scope="module")
def java_check(tmp_path_factory: pytest.TempPathFactory):
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("needs a JDK")
    classes = tmp_path_factory.mktemp("settings-check")
    classpath = f"{classes}:{provider_jar()}:{pyspark_jars_dir()}/*"
    subprocess.run(
        ["javac", "--release", "17", "-nowarn", "-cp", classpath, "-d", str(classes),
         str(DRIVER / "SettingsCheck.java")],
        check=True, capture_output=True, text=True,
    )  # fmt: skip

    def check(lines: list[str]) -> list[str]:
        result = subprocess.run(
            ["java", "-Xmx128m", "-cp", classpath, "io.statestore.spark.SettingsCheck"],
            input="".join(line + "\n" for line in lines), capture_output=True, text=True, check=True, timeout=120,
        )  # fmt: skip
        return result.stdout.splitlines()

    return check


def test_the_provider_refuses_what_enable_refuses_with_the_same_words(java_check) -> None:
    cases = [(s, raw) for s in SETTINGS if s.name in JAVA_READS and type(s.kind) in BAD for raw in bad_values(s.kind)]
    cases += [(s, raw) for s in SETTINGS if s.name in JAVA_READS for raw, _ in GOOD.get(type(s.kind), [])]
    cases += [(s, s.default) for s in SETTINGS if s.name in JAVA_READS and s.default is not None]
    answers = java_check([f"{s.key}={raw}" for s, raw in cases] + [""])
    assert answers[-1] == "ok"  # every default
    for (setting, raw), answer in zip(cases, answers, strict=False):
        try:
            spark_confs({setting.key: raw})
            python = "ok"
        except SettingError as exc:
            python = str(exc)
        assert answer == python, (setting.key, raw)
    assert sum(a != "ok" for a in answers) >= 40, answers


def test_a_bad_conf_set_on_a_running_session_fails_the_query_naming_it_and_loses_nothing(tmp_path: Path) -> None:
    """The provider checks its confs at init: a query whose session has a bad value fails naming it; once the
    value is fixed, the query resumes from its checkpoint with every row."""
    from conftest import StreamRun, make_spark
    from pyspark.sql import functions as F

    spark = make_spark("local[1]", "statestore-settings", replication_factor=0)
    try:
        run = StreamRun(
            spark, tmp_path, {"events": "k string, v long"},
            lambda _s, streams: streams["events"].groupBy("k").agg(F.sum("v").alias("s")), "update", "statestore",
        )  # fmt: skip
        run.feed([{"events": [{"k": "a", "v": 1}, {"k": "b", "v": 2}]}])
        run.run()
        run.feed([{"events": [{"k": "a", "v": 10}]}])
        spark.conf.set(PREFIX + "zstdLevel", "99")
        with pytest.raises(Exception) as failure:
            run.run()
        assert f"statestore setting {PREFIX}zstdLevel is '99': expected an integer from 1 to 22" in str(failure.value)
        spark.conf.set(PREFIX + "zstdLevel", "1")
        run.run()
        assert [rows for _, rows in run.results()] == [[("a", 1), ("b", 2)], [("a", 11)]]
    finally:
        spark.stop()


def test_the_readme_lists_every_setting_with_what_it_accepts() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    rows: dict[str, str] = {}
    for line in readme.splitlines():
        if line.startswith("| `"):
            rows.setdefault(line.split("`")[1], line)
    for setting in SETTINGS:
        assert setting.name in rows, f"README's settings table lacks {setting.name}"
        assert f"`{setting.key}`" in rows[setting.name] and f"| {setting.kind.expected} |" in rows[setting.name]
