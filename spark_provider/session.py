"""`enable()`: turn a SparkSession (or its builder) onto the statestore provider with one call."""

from __future__ import annotations

import os
import re
import secrets
import sys
from pathlib import Path
from typing import Any

from spark_provider.jar import provider_jar
from spark_provider.settings import (
    BY_KEY,
    BY_NAME,
    PLUGIN_CLASS,
    PREFIX,
    PROVIDER_CLASS,
    QUERY_LISTENER_CLASS,
    QUERY_LISTENERS_KEY,
    SettingError,
    spark_confs,
)


def _with_class(existing: str | None, name: str) -> str:
    classes = [c for c in (existing or "").split(",") if c and c != name]
    return ",".join([*classes, name])


def _with_jar(existing: str | None, jar: str) -> str:
    jars = [j for j in (existing or "").split(",") if j and Path(j).name != Path(jar).name]
    return ",".join([*jars, jar])


_DEFAULTS_LINE = re.compile(r"^\s*([^\s=:#!]+)\s*[=:\s]\s*(.*?)\s*$")


def _defaults_file_confs() -> dict[str, str]:
    """The confs of the `spark-defaults.conf` a launch of Spark's JVM from this process reads (SPARK_CONF_DIR,
    else SPARK_HOME/conf), {} when there is none."""
    conf_dir = os.environ.get("SPARK_CONF_DIR") or (
        str(Path(os.environ["SPARK_HOME"]) / "conf") if os.environ.get("SPARK_HOME") else ""
    )
    path = Path(conf_dir) / "spark-defaults.conf" if conf_dir else None
    if path is None or not path.is_file():
        return {}
    found = {}
    for line in path.read_text("utf-8", errors="replace").splitlines():
        if line.strip().startswith(("#", "!")):
            continue
        match = _DEFAULTS_LINE.match(line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def _submitted_confs() -> dict[str, str]:
    """The Spark confs this application has from outside its builder: spark-submit's (`--conf`, `--jars`, the jars
    `--packages` resolved, `spark-defaults.conf`), read from the driver's JVM when spark-submit started this Python
    (the JVM runs already, and the builder's options are laid over these); else those of the `spark-defaults.conf`
    the JVM this process launches will read."""
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        from pyspark import SparkConf, SparkContext

        SparkContext._ensure_initialized()  # connects to the JVM that started this process; launches nothing
        return {str(k): str(v) for k, v in SparkConf().getAll()}
    return _defaults_file_confs()


def _builder_confs(builder: Any) -> dict[str, str]:
    """What the session a builder makes will have: the confs from outside it, under its own options."""
    return {**_submitted_confs(), **{k: str(v) for k, v in builder._options.items()}}


def _existing_confs(builder_or_session: Any) -> dict[str, str]:
    """The confs the builder (its options, over spark-submit's and spark-defaults.conf's) or the running session
    already has under our settings' keys."""
    if getattr(builder_or_session, "_options", None) is not None:
        confs = _builder_confs(builder_or_session)
        return {k: v for k, v in confs.items() if k.startswith(PREFIX) or k in BY_KEY}
    conf = builder_or_session.sparkContext.getConf()
    found = {k: v for k, v in conf.getAll() if k.startswith(PREFIX) or k in BY_KEY}
    for key in BY_KEY:
        value = builder_or_session.conf.get(key, None)
        if value is not None:
            found[key] = value
    return found


def _tls_files(confs: dict[str, str]) -> Any:
    """The TLS files of the settings (`statestore.tls.TlsFiles`, None when unset); a file that is missing, or a
    certificate without its key, is a SettingError naming the settings."""
    names = ("tls_cert", "tls_key", "tls_ca")
    cert, key, ca = (confs.get(BY_NAME[name].key) for name in names)
    if not (cert or key or ca):
        return None
    from statestore import tls  # grpc loads only when TLS is on

    try:
        return tls.TlsFiles.of(cert, key, ca, "statestore settings tls_cert, tls_key, tls_ca")
    except tls.TlsError as exc:
        raise SettingError(str(exc)) from None


def _python_confs(builder_or_session: Any) -> dict[str, str]:
    """Spark confs naming this Python (which has this package) where nothing names one yet: the driver's, for the
    controller the driver side starts, and, when the executors run on this machine (`local`, `local-cluster`),
    theirs, for the state nodes they start. Spark confs, not a session's: the builder or the driver side takes
    them."""
    found = {}
    if not _spark_conf(builder_or_session, "spark.pyspark.driver.python"):
        found["spark.pyspark.driver.python"] = sys.executable
    options = _builder_confs(builder_or_session) if hasattr(builder_or_session, "_options") else None
    master = options.get("spark.master") if options is not None else builder_or_session.sparkContext.master
    named = os.environ.get("PYSPARK_PYTHON") or any(
        _spark_conf(builder_or_session, key) for key in ("spark.executorEnv.PYSPARK_PYTHON", "spark.pyspark.python")
    )
    if str(master or "").startswith("local") and not named:
        found["spark.executorEnv.PYSPARK_PYTHON"] = sys.executable
    return found


def _spark_conf(builder_or_session: Any, key: str) -> str:
    """A Spark conf the builder (over spark-submit's) or the running SparkContext has ("" if unset)."""
    if getattr(builder_or_session, "_options", None) is not None:
        return str(_builder_confs(builder_or_session).get(key) or "")
    return builder_or_session.sparkContext.getConf().get(key) or ""


def _spark_secret(builder_or_session: Any) -> str:
    """Spark's own `spark.authenticate.secret` when the user set one ("" if not)."""
    return _spark_conf(builder_or_session, "spark.authenticate.secret")


def enable(
    builder_or_session: Any,
    jar: str | Path | None = None,
    *,
    spark_rocksdb: bool = False,
    replica_files_dir: str | None = None,
    checkpoint_schemes: tuple[str, ...] | list[str] | str | None = None,
    **settings: object,
) -> Any:
    """Configure Spark to keep streaming state in the statestore provider: a convenience that sets the Spark confs
    `statestore spark-conf` prints (the same confs work in `spark-submit --conf`, `spark-defaults.conf` or a Spark
    Connect server's command).

    `builder_or_session` is a `SparkSession.Builder` (preferred: the jar and the plugin are then on the driver's
    and the executors' class path from the start) or a running `SparkSession` (the jar is added with `addJar`).
    `jar` overrides the automatically built jar; `settings` are the keyword names listed in
    `spark_provider.settings.SETTINGS`; a value of ours the builder or session already has (`.config(key, v)`)
    is kept unless a keyword overrides it. Every value is checked here: a bad one raises
    `spark_provider.settings.SettingError` (a ValueError) naming the setting, the value and what is allowed.
    Returns what it was given, so builder calls chain.

    With a replication factor above 0 (the default is 1) and no `controller` setting, the plugin's driver side
    starts the replica groups' controller as a sidecar of the driver's JVM while the SparkContext starts (for a
    running session: now), and Spark's executor events reach it there; executors start their state nodes as
    they start. The controller's address is then the session's `controller` conf, and this process's calls to it
    (`spark_provider.move`, `status`...) find its secret in this host's registry (statestore.registry).

    `spark_rocksdb=True` keeps Spark's own RocksDB provider instead (transformWithState, Real-Time Mode, offline
    repartition and queries already running on it need it) and puts the checkpoint file layer under it
    (`spark_provider.checkpoint_files`): each host keeps a local copy of the state files its executors write, in
    `replica_files_dir` (default: `$STATESTORE_REPLICA_FILES_DIR`, else the JVM's temporary directory), and later
    loads there read them. With a replication factor above 0 (the default is 1) the state nodes and the controller
    run as for our provider: each executor's node ships its host's copies to the partition's replica group on other
    hosts, and a lost executor's partitions are steered to the host holding their newest files. A builder only
    (Hadoop picks the `file:` file system once per JVM); of our settings only those that configure the nodes and
    the controller apply (`spark_provider.checkpoint_files.FILE_LAYER_SETTINGS`). `checkpoint_schemes` names the URI
    schemes of the checkpoint locations whose state files the layer keeps (default `("file",)`; for example
    `("s3a",)` or `("file", "abfss")`): a scheme other than `file` is wrapped around its own file system class.
    """
    _refuse_spark_connect(builder_or_session)
    layer = spark_rocksdb or replica_files_dir is not None or checkpoint_schemes is not None
    if hasattr(builder_or_session, "getOrCreate") and _context_running() and (spark_rocksdb or not layer):
        if spark_rocksdb:
            raise SettingError(
                "spark_rocksdb=True needs the builder before any SparkContext starts in this process (Hadoop picks "
                "the file: file system once per JVM, and the layer's classes must be on the driver's class path from "
                "its start): call enable() before the first getOrCreate(), or restart the Python process"
            )
        # The running context's class path and plugins are fixed, and a builder's options would reach it only as
        # SQL confs: configure the running session instead (the jar added, the controller attached).
        enable(builder_or_session.getOrCreate(), jar, **settings)
        return builder_or_session
    if layer:
        return _enable_checkpoint_files(
            builder_or_session, jar, spark_rocksdb, replica_files_dir, settings, checkpoint_schemes or ("file",)
        )
    confs = {
        "spark.sql.streaming.stateStore.providerClass": PROVIDER_CLASS,
        **spark_confs(_existing_confs(builder_or_session), **settings),
    }
    jar_path = str(Path(jar) if jar is not None else provider_jar())
    replicating = _with_secret(builder_or_session, confs)
    controller_key = BY_NAME["controller"].key
    if hasattr(builder_or_session, "getOrCreate"):
        return _with_confs(builder_or_session, confs, jar_path, replicating)
    python_confs = _python_confs(builder_or_session) if replicating else {}
    session = builder_or_session
    context = session.sparkContext
    context._jsc.addJar(jar_path)
    for key, value in confs.items():
        session.conf.set(key, value)
    if replicating and not confs.get(controller_key):
        session.conf.set(controller_key, _attach_controller(context, {**confs, **python_confs}, jar_path))
        session._jsparkSession.streams().addListener(context._jvm.io.statestore.spark.QueryStarts())
    return session


def _context_running() -> bool:
    """Whether a SparkContext runs in this process already."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def _refuse_spark_connect(builder_or_session: Any) -> None:
    """A Spark Connect client cannot be enabled from its side: the driver is the server's JVM, and a client's
    confs reach it only as runtime SQL confs (no jar, no plugin, no listener)."""
    options = getattr(builder_or_session, "_options", None)
    remote = (options or {}).get("spark.remote") or (os.environ.get("SPARK_REMOTE") if options is not None else "")
    connect_session = type(builder_or_session).__module__.startswith("pyspark.sql.connect")
    if remote or connect_session:
        raise SettingError(
            "enable() cannot turn a Spark Connect client onto the statestore provider: the driver is the Connect "
            "server's JVM, and a client's confs reach it only as runtime SQL confs. Start the server with the confs "
            "`statestore spark-conf` prints, then in the client: spark.conf.set("
            f"'spark.sql.streaming.stateStore.providerClass', '{PROVIDER_CLASS}') (README, Spark Connect)"
        )


def _with_secret(builder_or_session: Any, confs: dict[str, str]) -> bool:
    """Completes `confs` with the application's secret when replication runs our controller, or remembers the
    secret and TLS files of a controller of the user's for this process's calls to it; returns whether replication
    is on."""
    tls_files = _tls_files(confs)
    secret_key = BY_NAME["secret"].key
    controller_key = BY_NAME["controller"].key
    replicating = int(confs[BY_NAME["replication_factor"].key]) > 0
    if replicating and not confs.get(controller_key):
        # Ours: calls to it and to the nodes carry the application's secret.
        confs[secret_key] = confs.get(secret_key) or _spark_secret(builder_or_session) or secrets.token_hex(32)
    elif confs.get(controller_key):  # a controller of the user's: this process's calls to it carry its secret and
        # TLS files (ours are found in its registration on this host: statestore.auth)
        from statestore import auth, tls

        if confs.get(secret_key):
            auth.remember(confs[controller_key], confs[secret_key])
        if tls_files is not None:
            tls.use_for(confs[controller_key], tls_files)
    return replicating


def _with_confs(builder: Any, confs: dict[str, str], jar_path: str, replicating: bool) -> Any:
    """`builder` with the jar, `confs` and, when replicating, the plugin (the driver side starts the controller;
    each executor starts its state node as it starts), the query listener (a restarted query's partitions are
    steered before its first batch) and the Python that runs them."""
    # The lists Spark takes one value of are merged with what spark-submit or spark-defaults.conf gave, which the
    # builder's value would replace.
    options = _builder_confs(builder) if hasattr(builder, "_options") else {}
    python_confs = _python_confs(builder) if replicating else {}
    builder = builder.config("spark.jars", _with_jar(options.get("spark.jars"), jar_path))
    if replicating:
        builder = builder.config("spark.plugins", _with_class(options.get("spark.plugins"), PLUGIN_CLASS))
        listeners = _with_class(options.get(QUERY_LISTENERS_KEY), QUERY_LISTENER_CLASS)
        builder = builder.config(QUERY_LISTENERS_KEY, listeners)
    for key, value in {**confs, **python_confs}.items():
        builder = builder.config(key, value)
    return builder


def _enable_checkpoint_files(
    builder: Any,
    jar: str | Path | None,
    spark_rocksdb: bool,
    copies_dir: str | None,
    settings: dict[str, object],
    schemes: tuple[str, ...] | list[str] | str,
) -> Any:
    """enable(spark_rocksdb=True): the checkpoint file layer's confs on a builder, with the state nodes and the
    controller that ship its copies to other hosts unless `replication_factor` is 0."""
    from spark_provider.checkpoint_files import (
        FILE_LAYER_SETTINGS,
        checkpoint_file_confs,
        refused_settings,
        scheme_list,
    )

    if not spark_rocksdb:
        raise SettingError(
            "replica_files_dir and checkpoint_schemes apply with spark_rocksdb=True only (Spark's provider, our file "
            "layer)"
        )
    refused_settings(list(settings))
    if not hasattr(builder, "getOrCreate"):
        raise SettingError(
            "spark_rocksdb=True needs a SparkSession.Builder, not a running session: Hadoop picks the file: file "
            "system once per JVM, and the layer's classes must be on the driver's class path from its start"
        )
    jar_path = str(Path(jar) if jar is not None else provider_jar())
    existing = _builder_confs(builder) if hasattr(builder, "_options") else {}
    for key, value in checkpoint_file_confs(jar_path, existing, copies_dir, scheme_list(schemes)).items():
        builder = builder.config(key, value)
    applying = {BY_NAME[name].key for name in FILE_LAYER_SETTINGS}
    confs = {k: v for k, v in spark_confs(_existing_confs(builder), **settings).items() if k in applying}
    replicating = _with_secret(builder, confs)
    return _with_confs(builder, confs, jar_path, replicating)


def _attach_controller(context: Any, confs: dict[str, str], jar_path: str) -> str:
    """Start the plugin's driver side for a SparkContext that started without the plugin; its address."""
    jvm = context._jvm
    # `addJar` reaches the executors only: the driver's class loader (a MutableURLClassLoader under spark-submit,
    # which PySpark's JVM runs in; py4j resolves classes through it) takes the jar too.
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    if hasattr(loader, "addURL"):
        loader.addURL(jvm.java.io.File(jar_path).toURI().toURL())
    conf = context._jsc.sc().conf()
    for key, value in confs.items():  # what the driver side reads its settings from
        conf.set(key, value)
    address = jvm.io.statestore.spark.DriverSide.attach(context._jsc.sc())
    if not address:
        raise RuntimeError("statestore: the driver's JVM started no controller (see the driver's log)")
    return str(address)
