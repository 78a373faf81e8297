"""Build the provider's jar from the Java sources with the JDK's `javac` and `jar`, cached on disk.

One jar per Spark line: the common sources (`spark_provider/java`) and that line's adapter
(`spark_provider/java_lines/<line>/`: what differs between lines), compiled against the installed pyspark's jars.
The cache key is the pyspark version plus a hash of those sources, so editing a source or upgrading pyspark
rebuilds it, and the first Spark session of a fresh clone compiles it once (a few seconds).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

JAVA_ROOT = Path(__file__).resolve().parent / "java"
LINES_ROOT = Path(__file__).resolve().parent / "java_lines"
# Spark line (major.minor of pyspark) -> its adapter's directory under java_lines/ (4.1 and 4.2 share one).
SPARK_LINES = {"4.0": "4.0", "4.1": "4.1", "4.2": "4.1", "4.3": "4.3"}
DEFAULT_CACHE = Path(os.environ.get("STATESTORE_CACHE", Path.home() / ".cache" / "statestore"))


class JarBuildError(RuntimeError):
    """The provider jar could not be built (no JDK, or the sources do not compile)."""


def pyspark_jars_dir() -> Path:
    """The directory holding the installed pyspark's jars (Spark, Hadoop, rocksdbjni, ...)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def spark_line(version: str | None = None) -> str:
    """The adapter directory for pyspark `version` (default: the installed one); a JarBuildError names the
    supported lines otherwise."""
    if version is None:
        import pyspark

        version = pyspark.__version__
    line = ".".join(version.split(".")[:2])
    if line not in SPARK_LINES:
        raise JarBuildError(
            f"pyspark {version} is not supported by the statestore provider: supported Spark lines are "
            f"{', '.join(sorted(SPARK_LINES))}"
        )
    return SPARK_LINES[line]


def java_sources(line: str | None = None) -> list[Path]:
    """The provider's Java sources for a Spark line's jar (default: the installed pyspark's), sorted."""
    adapter = LINES_ROOT / (line if line is not None else spark_line())
    return sorted(JAVA_ROOT.rglob("*.java")) + sorted(adapter.rglob("*.java"))


def cache_key() -> str:
    """The pyspark version and a hash of the Java sources, as used in the cached jar's name."""
    import pyspark

    digest = hashlib.sha256()
    for src in java_sources():
        digest.update(str(src.relative_to(JAVA_ROOT.parent)).encode())
        digest.update(src.read_bytes())
    return f"pyspark{pyspark.__version__}-{digest.hexdigest()[:16]}"


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        java_home = os.environ.get("JAVA_HOME")
        candidate = Path(java_home) / "bin" / name if java_home else None
        if candidate is not None and candidate.exists():
            return str(candidate)
        raise JarBuildError(
            f"`{name}` not found: the statestore Spark provider is compiled on first use and needs a JDK 17+ "
            f"(install openjdk-17-jdk-headless or set JAVA_HOME), or pass a prebuilt jar built elsewhere "
            f"with `statestore build-jar --out PATH`"
        )
    return found


def build_jar(out: Path) -> Path:
    """Compile the Java sources against pyspark's jars and package them into `out`."""
    javac, jar = _tool("javac"), _tool("jar")
    sources = java_sources()
    if not sources:
        raise JarBuildError(f"no Java sources under {JAVA_ROOT}")
    classpath = str(pyspark_jars_dir() / "*")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="statestore-javac-") as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        print(f"statestore: compiling {len(sources)} Java sources for the Spark provider ...", file=sys.stderr)
        cmd = [javac, "--release", "17", "-nowarn", "-cp", classpath, "-d", str(classes), *map(str, sources)]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise JarBuildError(f"javac failed:\n{result.stdout}{result.stderr}")
        staging = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        result = subprocess.run([jar, "cf", str(staging), "-C", str(classes), "."], capture_output=True, text=True)
        if result.returncode != 0:
            raise JarBuildError(f"jar failed:\n{result.stdout}{result.stderr}")
        os.replace(staging, out)
    return out


def provider_jar(cache_dir: Path | None = None) -> Path:
    """The path of the provider jar for this pyspark and these sources, building it on first use."""
    cache = Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE
    target = cache / f"statestore-spark-provider-{cache_key()}.jar"
    if not target.exists():
        build_jar(target)
    return target
