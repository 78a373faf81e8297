"""The provider's jar: one per Spark line, prebuilt in the package, or built from the Java sources with `javac`.

A line's jar is the Spark-line-independent core (`spark_provider/java`), the Spark contract of its family
(`spark_provider/java_spark4` for 4.0 to 4.3; Spark 3.5's is in its adapter) and that line's adapter
(`spark_provider/java_lines/`: what differs between lines), compiled against that line's Spark jars. The package
carries one prebuilt jar per supported line (`spark_provider/jars/`, each recording in its manifest the hash of the
sources it was built from), so `enable()` needs no JDK: it uses the installed pyspark's line's jar when its sources
are the ones installed. Where they are not (a developer edited a Java source), the jar is compiled with the JDK's
`javac` against the installed pyspark's jars and cached on disk, keyed by the pyspark version and the sources' hash.
`statestore build-jar --refresh-packaged` rebuilds the prebuilt jars (against `.venvs/pyspark-<release>`,
`spark_provider.spark_lines`); a test fails when one is stale.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

JAVA_ROOT = Path(__file__).resolve().parent / "java"
SPARK4_ROOT = Path(__file__).resolve().parent / "java_spark4"
LINES_ROOT = Path(__file__).resolve().parent / "java_lines"
PACKAGED_ROOT = Path(__file__).resolve().parent / "jars"
DEFAULT_CACHE = Path(os.environ.get("STATESTORE_CACHE", Path.home() / ".cache" / "statestore"))
# Spark line (major.minor of pyspark) -> its adapter's directory under java_lines/ (4.1 to 4.3 share one).
SPARK_LINES = {"3.5": "3.5", "4.0": "4.0", "4.1": "4.1", "4.2": "4.1", "4.3": "4.1"}
# The release each line's prebuilt jar is compiled against: the line's latest patch release.
LINE_RELEASES = {"3.5": "3.5.9", "4.0": "4.0.5", "4.1": "4.1.4", "4.2": "4.2.1", "4.3": "4.3.0"}
_SOURCES_ATTRIBUTE = "Statestore-Sources-SHA256"
_SPARK_ATTRIBUTE = "Statestore-Built-Against-Spark"


class JarBuildError(RuntimeError):
    """The provider jar could not be built (no JDK, or the sources do not compile)."""


def pyspark_jars_dir() -> Path:
    """The directory holding the installed pyspark's jars (Spark, Hadoop, rocksdbjni, ...)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def installed_line() -> str:
    """The installed pyspark's Spark line (major.minor); a JarBuildError names the supported lines otherwise."""
    import pyspark

    return spark_line(pyspark.__version__)


def spark_line(version: str) -> str:
    """The Spark line (major.minor) of pyspark `version`; a JarBuildError names the supported lines otherwise."""
    line = ".".join(version.split(".")[:2])
    if line not in SPARK_LINES:
        raise JarBuildError(
            f"pyspark {version} is not supported by the statestore provider: supported Spark lines are "
            f"{', '.join(sorted(SPARK_LINES))}"
        )
    return line


def java_sources(line: str | None = None) -> list[Path]:
    """The Java sources of a Spark line's jar (default: the installed pyspark's line), sorted."""
    line = line if line is not None else installed_line()
    contract = sorted(SPARK4_ROOT.rglob("*.java")) if not line.startswith("3.") else []
    return sorted(JAVA_ROOT.rglob("*.java")) + contract + sorted((LINES_ROOT / SPARK_LINES[line]).rglob("*.java"))


def sources_hash(line: str | None = None) -> str:
    """The SHA-256 of a line's Java sources (their paths and bytes)."""
    digest = hashlib.sha256()
    for src in java_sources(line):
        digest.update(str(src.relative_to(JAVA_ROOT.parent)).encode())
        digest.update(src.read_bytes())
    return digest.hexdigest()


def cache_key() -> str:
    """The pyspark version and a hash of the Java sources, as used in the cached jar's name."""
    import pyspark

    return f"pyspark{pyspark.__version__}-{sources_hash()[:16]}"


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        java_home = os.environ.get("JAVA_HOME")
        candidate = Path(java_home) / "bin" / name if java_home else None
        if candidate is not None and candidate.exists():
            return str(candidate)
        raise JarBuildError(
            f"`{name}` not found: the statestore Spark provider's Java sources differ from its prebuilt jars, so it "
            f"is compiled on first use and needs a JDK 17+ (install openjdk-17-jdk-headless or set JAVA_HOME), or "
            f"pass a prebuilt jar built elsewhere with `statestore build-jar --out PATH`"
        )
    return found


def build_jar(out: Path, line: str | None = None, spark_jars: Path | None = None) -> Path:
    """Compile a line's Java sources (default: the installed pyspark's) against `spark_jars` (default: the installed
    pyspark's jars) and package them into `out`, the sources' hash and the Spark built against in its manifest."""
    javac, jar = _tool("javac"), _tool("jar")
    line = line if line is not None else installed_line()
    sources = java_sources(line)
    jars = spark_jars if spark_jars is not None else pyspark_jars_dir()
    built_against = next((p.stem.split("-")[-1] for p in jars.glob("spark-sql_2.1*-*.jar")), "unknown")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="statestore-javac-") as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        print(f"statestore: compiling {len(sources)} Java sources for the Spark {line} provider ...", file=sys.stderr)
        cmd = [javac, "--release", "17", "-nowarn", "-cp", str(jars / "*"), "-d", str(classes), *map(str, sources)]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise JarBuildError(f"javac failed:\n{result.stdout}{result.stderr}")
        manifest = Path(tmp) / "MANIFEST.MF"
        manifest.write_text(f"{_SOURCES_ATTRIBUTE}: {sources_hash(line)}\n{_SPARK_ATTRIBUTE}: {built_against}\n")
        staging = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        result = subprocess.run(
            [jar, "cfm", str(staging), str(manifest), "-C", str(classes), "."], capture_output=True, text=True
        )
        if result.returncode != 0:
            raise JarBuildError(f"jar failed:\n{result.stdout}{result.stderr}")
        os.replace(staging, out)
    return out


def manifest_attributes(jar: Path) -> dict[str, str]:
    """The main attributes of a jar's manifest (its lines are wrapped at 72 bytes: a leading space continues one)."""
    with zipfile.ZipFile(jar) as archive:
        text = archive.read("META-INF/MANIFEST.MF").decode("utf-8")
    joined = text.replace("\r\n", "\n").replace("\n ", "")
    pairs = (line.split(": ", 1) for line in joined.splitlines() if ": " in line)
    return {key: value for key, value in pairs}


def packaged_jar_path(line: str) -> Path:
    """Where the package keeps the prebuilt jar of a Spark line."""
    return PACKAGED_ROOT / f"statestore-spark-provider-spark{line}.jar"


def packaged_jar(line: str) -> Path | None:
    """The prebuilt jar of a Spark line if the package has one built from the sources installed, else None."""
    path = packaged_jar_path(line)
    if not path.exists():
        return None
    return path if manifest_attributes(path).get(_SOURCES_ATTRIBUTE) == sources_hash(line) else None


def provider_jar(cache_dir: Path | None = None) -> Path:
    """The provider jar for the installed pyspark: the package's prebuilt one for its line when it was built from
    these sources (no JDK needed), else one compiled from them on first use and cached."""
    prebuilt = packaged_jar(installed_line())
    if prebuilt is not None:
        return prebuilt
    cache = Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE
    target = cache / f"statestore-spark-provider-{cache_key()}.jar"
    if not target.exists():
        build_jar(target)
    return target


def refresh_packaged_jars(lines: list[str], spark_jars_of: dict[str, Path]) -> list[Path]:
    """Rebuild the prebuilt jars of `lines` against the Spark jars `spark_jars_of[line]`; returns those written."""
    written = []
    for line in lines:
        out = packaged_jar_path(line)
        if packaged_jar(line) is not None:
            print(f"statestore: the Spark {line} jar is up to date", file=sys.stderr)
            continue
        written.append(build_jar(out, line, spark_jars_of[line]))
    return written
