"""`enable(builder)` where the builder is not the whole story:

- in a PySpark application started by `spark-submit`, what spark-submit gave (`--jars`, `--conf`,
  spark-defaults.conf) is kept. The builder's options are laid over spark-submit's confs when the session starts, so
  `enable()` used to replace `spark.jars` with the provider's jar alone (an application's `--jars` or `--packages`
  jars were gone from its executors) and reset our settings given with `--conf` to their defaults;
- with a SparkContext already running (a notebook), a builder's options reach it only as SQL confs: the provider
  class was set without its jar, and the first query failed on a missing class. The running session is configured;
- a Spark Connect builder is refused, saying what to do instead."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pyspark
import pytest

from spark_provider.settings import BY_NAME, PROVIDER_CLASS

HERE = Path(__file__).resolve().parent
SPARK_HOME = Path(pyspark.__file__).parent
REPLICATION = BY_NAME["replication_factor"].key
PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"


def test_enable_keeps_what_spark_submit_gave(tmp_path: Path) -> None:
    theirs = tmp_path / "their-library.jar"
    with zipfile.ZipFile(theirs, "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
    python = sys.executable
    env = {
        **os.environ,
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": python,
        "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [str(SPARK_HOME / "bin" / "spark-submit"), "--master", "local[1]", "--jars", str(theirs),
         "--conf", f"{REPLICATION}=0", str(HERE / "submitted_app" / "enable_and_report.py"),
         "spark.jars", REPLICATION, PROVIDER_KEY],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    confs = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("CONFS "))[6:])
    jars = confs["spark.jars"].split(",")
    assert any(j.endswith("their-library.jar") for j in jars), confs
    assert any("statestore-spark-provider" in j for j in jars), confs
    assert confs[REPLICATION] == "0", confs  # given with --conf: not reset to the default
    assert confs[PROVIDER_KEY] == PROVIDER_CLASS


def test_enable_on_a_builder_while_a_context_runs_configures_the_running_session(tmp_path: Path) -> None:
    script = (
        "from pyspark.sql import SparkSession\n"
        "import spark_provider\n"
        "first = SparkSession.builder.master('local[1]').getOrCreate()\n"
        "spark = spark_provider.enable(SparkSession.builder, replication_factor=0).getOrCreate()\n"
        "jars = [str(j) for j in spark.sparkContext._jsc.sc().listJars().toList().mkString(',').split(',')]\n"
        "print('PROVIDER ' + spark.conf.get('" + PROVIDER_KEY + "'))\n"
        "print('JARS ' + ','.join(jars))\n"
        "spark.stop()\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("PROVIDER ", "JARS ")))
    assert lines["PROVIDER"] == PROVIDER_CLASS, done.stdout
    assert "statestore-spark-provider" in lines["JARS"], done.stdout


def test_enable_refuses_a_spark_connect_builder_saying_what_to_do() -> None:
    from pyspark.sql import SparkSession

    from spark_provider.settings import SettingError

    with pytest.raises(SettingError, match="Spark Connect client") as raised:
        import spark_provider

        spark_provider.enable(SparkSession.builder.remote("sc://localhost:15002"))
    assert "statestore spark-conf" in str(raised.value)
