"""The supported Spark lines' environments, for developing against every line: one virtual environment per line's
latest patch release (`.venvs/pyspark-<release>`, this project installed editable with that pyspark), made on first
use. `bench/spark_lines_bench.py` runs the compatibility tests in them; `statestore build-jar --refresh-packaged`
compiles each line's prebuilt jar against their Spark jars."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from spark_provider.jar import LINE_RELEASES

ROOT = Path(__file__).resolve().parents[1]
VENVS = ROOT / ".venvs"
# What a release's own pandas functions need beyond our requirements: pyspark 3.5's applyInPandasWithState reads
# its state's row counts as floats under numpy 2 and pandas 2.3 (pyarrow's RecordBatch.slice then refuses them),
# on Spark's own provider as on ours; these are the versions its compatibility subset passes with.
RELEASE_REQUIREMENTS = {"3.5.9": ["numpy<2", "pandas>=2.2,<2.3", "pyarrow>=17,<18"]}


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def venv_python(release: str) -> Path:
    """The python of the environment for pyspark `release`, made and filled on first use (and again when
    pyproject.toml changed since)."""
    venv = VENVS / f"pyspark-{release}"
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    if not marker.exists() or marker.stat().st_mtime < (ROOT / "pyproject.toml").stat().st_mtime:
        _log(f"pyspark {release}: making {venv} (pip install; the first time downloads Spark)")
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", f"{ROOT}[test]", f"pyspark=={release}",
                        *RELEASE_REQUIREMENTS.get(release, [])], check=True)  # fmt: skip
        marker.touch()
    return python


def spark_jars_of(line: str) -> Path:
    """The Spark jars of a line's latest release, from its environment (made on first use)."""
    python = venv_python(LINE_RELEASES[line])
    found = subprocess.run(
        [str(python), "-c", "import pathlib, pyspark; print(pathlib.Path(pyspark.__file__).parent / 'jars')"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return Path(found.stdout.strip())


def main(argv: list[str] | None = None) -> int:
    """`python -m spark_provider.spark_lines LINE...`: make the environments of those Spark lines (for example
    ahead of `bench/spark_lines_bench.py`, while something else runs)."""
    lines = sys.argv[1:] if argv is None else argv
    unknown = sorted(set(lines) - set(LINE_RELEASES))
    if unknown:
        print(f"unsupported Spark line(s) {unknown}; supported: {sorted(LINE_RELEASES)}", file=sys.stderr)
        return 2
    for line in lines:
        venv_python(LINE_RELEASES[line])
        _log(f"pyspark {LINE_RELEASES[line]}: environment ready")
    return 0


if __name__ == "__main__":
    sys.exit(main())
