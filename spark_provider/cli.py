"""`statestore build-jar`: write the provider jar for users who ship it to a cluster. `statestore spark-conf`:
the `--jars`/`--conf` lines that put an application on our provider by Spark confs alone."""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
from pathlib import Path

from spark_provider.jar import (
    LINE_RELEASES,
    SPARK_LINES,
    JarBuildError,
    installed_line,
    manifest_attributes,
    packaged_jar,
    packaged_jar_path,
    provider_jar,
    refresh_packaged_jars,
)


def _jar_for(line: str | None) -> Path:
    """The jar of Spark `line` (default: the installed pyspark's): the package's prebuilt one, or one built here."""
    if line is None or line == installed_line():
        return provider_jar()
    prebuilt = packaged_jar(line)
    if prebuilt is None:
        raise JarBuildError(
            f"this package has no prebuilt jar of Spark {line} for its sources; build it with that line's pyspark "
            f"installed (pip install 'pyspark=={LINE_RELEASES[line]}', then statestore build-jar), or in a source tree "
            f"with statestore build-jar --refresh-packaged"
        )
    return prebuilt


def _list_lines() -> int:
    for line in sorted(SPARK_LINES):
        path = packaged_jar_path(line)
        if packaged_jar(line) is not None:
            state = f"prebuilt against Spark {manifest_attributes(path).get('Statestore-Built-Against-Spark', '?')}"
        elif path.exists():
            state = "prebuilt jar stale (its sources changed): built with javac on use"
        else:
            state = "no prebuilt jar: built with javac on use"
        print(f"Spark {line}: {state}")
    return 0


def _build_jar(args: argparse.Namespace) -> int:
    if args.list:
        return _list_lines()
    try:
        if args.refresh_packaged:
            from spark_provider.spark_lines import spark_jars_of

            lines = [args.spark] if args.spark else sorted(SPARK_LINES)
            written = refresh_packaged_jars(lines, {line: spark_jars_of(line) for line in lines})
            for path in written:
                print(f"wrote {path}")
            return 0
        if args.out is None:
            print("statestore build-jar: --out is required (or --list, --refresh-packaged)")
            return 2
        if args.spark is not None and args.spark not in SPARK_LINES:
            supported = ", ".join(sorted(SPARK_LINES))
            raise JarBuildError(f"Spark {args.spark} is not supported: supported lines are {supported}")
        built = _jar_for(args.spark)
    except JarBuildError as e:
        print(f"statestore build-jar: {e}")
        return 1
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(built, out)
    print(
        f"wrote {out} ({out.stat().st_size} bytes); use it with spark.jars and "
        f"spark.sql.streaming.stateStore.providerClass=io.statestore.spark.StatestoreProvider"
    )
    return 0


def _settings_confs(settings: dict[str, str], base: dict[str, str], python: str, file_layer: bool) -> dict[str, str]:
    """`base` with the confs of `settings` (keyword names or conf keys to values, checked: a SettingError names a
    bad one, or with `file_layer` one that configures only our provider), and, with replication on, the plugin
    (each executor's node, the driver's controller), the query listener (a restarted query steered before its
    first batch) and the Python that runs them (it needs this package). Only settings given are listed; every
    other one keeps its default."""
    from spark_provider.checkpoint_files import refused_settings
    from spark_provider.settings import (
        BY_KEY,
        BY_NAME,
        PLUGIN_CLASS,
        QUERY_LISTENER_CLASS,
        QUERY_LISTENERS_KEY,
        SettingError,
        spark_confs,
    )

    by_name = {}
    for given, value in settings.items():
        setting = BY_NAME.get(given) or BY_KEY.get(given)
        if setting is None:
            raise SettingError(f"unknown statestore setting {given!r}; known: {', '.join(sorted(BY_NAME))}")
        by_name[setting.name] = value
    if file_layer:
        refused_settings(list(by_name))
    checked = spark_confs(**by_name)
    confs = dict(base)
    if int(checked[BY_NAME["replication_factor"].key]) > 0:
        confs["spark.plugins"] = PLUGIN_CLASS
        confs[QUERY_LISTENERS_KEY] = QUERY_LISTENER_CLASS
        confs["spark.pyspark.python"] = python
    confs.update({BY_NAME[name].key: checked[BY_NAME[name].key] for name in by_name})
    return confs


def spark_conf_lines(settings: dict[str, str], jar: str, python: str, defaults_file: bool = False) -> list[str]:
    """The confs that run an application on our provider with `settings` (keyword names or conf keys to
    values, checked: a SettingError names a bad one), as `spark-submit` arguments or spark-defaults.conf lines.
    Only settings given (and those the provider needs) are listed; every other one keeps its default."""
    from spark_provider.settings import PROVIDER_CLASS

    base = {"spark.sql.streaming.stateStore.providerClass": PROVIDER_CLASS}
    confs = _settings_confs(settings, base, python, file_layer=False)
    if defaults_file:
        return [f"spark.jars {jar}", *(f"{key} {value}" for key, value in confs.items())]
    return [f"--jars {shlex.quote(jar)}", *(f"--conf {shlex.quote(f'{key}={value}')}" for key, value in confs.items())]


def checkpoint_file_lines(
    settings: dict[str, str],
    jar: str,
    copies_dir: str | None,
    python: str,
    defaults_file: bool = False,
    schemes: list[str] | None = None,
) -> list[str]:
    """The confs that keep Spark's own RocksDB provider with our checkpoint file layer under it, as spark-submit
    arguments or spark-defaults.conf lines, with the state nodes and the controller that replicate its copies
    (unless `replication_factor=0`), for the checkpoint locations of `schemes` (default: `file`); settings that
    configure only our provider are a SettingError."""
    from spark_provider.checkpoint_files import checkpoint_file_confs, scheme_list

    layer = checkpoint_file_confs(jar, {}, copies_dir, scheme_list(schemes or ["file"]))
    confs = _settings_confs(settings, layer, python, file_layer=True)
    if defaults_file:
        return [f"{key} {value}" for key, value in confs.items()]
    # Shell words: a class name like NativeAzureFileSystem$Secure must not lose its `$Secure` when pasted.
    return [f"--conf {shlex.quote(f'{key}={value}')}" for key, value in confs.items()]


def _spark_conf(args: argparse.Namespace) -> int:
    from spark_provider.settings import SettingError

    settings = {}
    for pair in args.settings:
        name, equals, value = pair.partition("=")
        if not equals:
            print(f"statestore spark-conf: {pair!r} is not NAME=VALUE", file=sys.stderr)
            return 2
        settings[name.strip()] = value.strip()
    if not args.spark_rocksdb and (args.replica_files_dir is not None or args.checkpoint_schemes):
        print("statestore spark-conf: --replica-files-dir and --checkpoint-scheme apply with --spark-rocksdb only "
              "(Spark's provider, our file layer)", file=sys.stderr)  # fmt: skip
        return 2
    try:
        jar = args.jar or str(provider_jar())
        if args.spark_rocksdb:
            lines = checkpoint_file_lines(
                settings, jar, args.replica_files_dir, args.python, args.defaults, args.checkpoint_schemes
            )
        else:
            lines = spark_conf_lines(settings, jar, args.python, args.defaults)
    except (SettingError, JarBuildError) as exc:
        print(f"statestore spark-conf: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines) if args.defaults else " \\\n".join(lines))
    return 0


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Register `build-jar` and `spark-conf` on the `statestore` command line."""
    parser = subparsers.add_parser("build-jar", help="write the Spark provider jar of a Spark line")
    parser.add_argument("--out", help="where to write the jar")
    parser.add_argument("--spark", metavar="LINE", help="Spark line, 4.0 to 4.3 (default: the installed pyspark's)")
    parser.add_argument("--list", action="store_true", help="list the supported Spark lines and their prebuilt jars")
    parser.add_argument(
        "--refresh-packaged", action="store_true",
        help="(developers) rebuild the package's prebuilt jars whose sources changed, against .venvs/pyspark-<release>",
    )  # fmt: skip
    parser.set_defaults(handler=_build_jar)

    confs = subparsers.add_parser(
        "spark-conf",
        help="print the --jars/--conf lines that run an application on this provider",
        description="Prints the spark-submit arguments (or, with --defaults, spark-defaults.conf lines) that put an "
        "application of any language, or a Spark Connect server, on this provider with the given settings "
        "(NAME=VALUE, NAME a setting's keyword name or conf key, as README's settings table lists them).",
    )
    confs.add_argument("settings", nargs="*", metavar="NAME=VALUE")
    confs.add_argument("--jar", help="the provider jar's path where the application runs (default: build it here)")
    confs.add_argument(
        "--python",
        default=sys.executable,
        help="the Python that runs the state nodes and the controller (default: this one, %(default)s)",
    )
    confs.add_argument("--defaults", action="store_true", help="spark-defaults.conf lines instead")
    confs.add_argument(
        "--spark-rocksdb", action="store_true",
        help="keep Spark's own RocksDB provider (transformWithState, Real-Time Mode, running queries) with the "
        "checkpoint file layer under it, which keeps each host's state files local",
    )  # fmt: skip
    confs.add_argument("--replica-files-dir", help="with --spark-rocksdb: the host directory for the local copies")
    confs.add_argument(
        "--checkpoint-scheme", dest="checkpoint_schemes", action="append", metavar="SCHEME",
        help="with --spark-rocksdb: a URI scheme of the checkpoint locations whose state files the layer keeps "
        "(repeatable; default: file), e.g. s3a, abfss, gs, hdfs",
    )
    confs.set_defaults(handler=_spark_conf)
