"""`enable()`: turn a SparkSession (or its builder) onto the statestore provider with one call."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from spark_provider.driver_controller import start_driver_controller
from spark_provider.jar import provider_jar
from spark_provider.settings import BY_KEY, BY_NAME, PLUGIN_CLASS, PREFIX, PROVIDER_CLASS, SettingError, spark_confs


def _with_class(existing: str | None, name: str) -> str:
    classes = [c for c in (existing or "").split(",") if c and c != name]
    return ",".join([*classes, name])


def _with_jar(existing: str | None, jar: str) -> str:
    jars = [j for j in (existing or "").split(",") if j and Path(j).name != Path(jar).name]
    return ",".join([*jars, jar])


def _existing_confs(builder_or_session: Any) -> dict[str, str]:
    """The confs the builder (its options) or the running session already has under our settings' keys."""
    options = getattr(builder_or_session, "_options", None)
    if options is not None:
        return {k: str(v) for k, v in options.items() if k.startswith(PREFIX) or k in BY_KEY}
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


def _spark_secret(builder_or_session: Any) -> str:
    """Spark's own `spark.authenticate.secret` when the user set one ("" if not)."""
    key = "spark.authenticate.secret"
    options = getattr(builder_or_session, "_options", None)
    if options is not None:
        return str(options.get(key) or "")
    return builder_or_session.sparkContext.getConf().get(key) or ""


def _master_and_driver_hosts(builder_or_session: Any) -> tuple[str | None, str | None, str | None]:
    """Spark's master, `spark.driver.host` and `spark.driver.bindAddress` (None where unset)."""
    options = getattr(builder_or_session, "_options", None)
    if options is not None:
        return options.get("spark.master"), options.get("spark.driver.host"), options.get("spark.driver.bindAddress")
    context = builder_or_session.sparkContext
    conf = context.getConf()
    return context.master, conf.get("spark.driver.host"), conf.get("spark.driver.bindAddress")


def enable(builder_or_session: Any, jar: str | Path | None = None, **settings: object) -> Any:
    """Configure Spark to keep streaming state in the statestore provider.

    `builder_or_session` is a `SparkSession.Builder` (preferred: the jar is then on the driver's and the
    executors' class path from the start) or a running `SparkSession` (the jar is added with `addJar`).
    `jar` overrides the automatically built jar; `settings` are the keyword names listed in
    `spark_provider.settings.SETTINGS`; a value of ours the builder or session already has (`.config(key, v)`)
    is kept unless a keyword overrides it. Every value is checked here: a bad one raises
    `spark_provider.settings.SettingError` (a ValueError) naming the setting, the value and what is allowed.
    Returns what it was given, so builder calls chain.

    With a replication factor above 0 (the default is 1) and no `controller` setting, it starts the replica
    groups' controller in this (the driver's) process, stopped when the SparkContext stops; executors start
    their state nodes as sidecars on their first commit.
    """
    confs = {
        "spark.sql.streaming.stateStore.providerClass": PROVIDER_CLASS,
        **spark_confs(_existing_confs(builder_or_session), **settings),
    }
    jar_path = str(Path(jar) if jar is not None else provider_jar())
    tls_files = _tls_files(confs)
    secret_key = BY_NAME["secret"].key
    if int(confs[BY_NAME["replication_factor"].key]) > 0 and not confs.get(BY_NAME["controller"].key):
        # Our controller: calls to it and to the nodes carry the application's secret.
        confs[secret_key] = confs.get(secret_key) or _spark_secret(builder_or_session) or secrets.token_hex(32)
        master, driver_host, bind_address = _master_and_driver_hosts(builder_or_session)
        controller = start_driver_controller(
            int(confs[BY_NAME["replication_factor"].key]),
            master,
            driver_host,
            float(confs[BY_NAME["forget_after_seconds"].key]),
            float(confs[BY_NAME["rereplication_delay_seconds"].key]),
            _load_balancing(confs),
            confs[secret_key],
            bind_address,
            tls_files,
            int(confs[BY_NAME["controller_port"].key]),
            int(confs[metrics]) if (metrics := BY_NAME["metrics_port"].key) in confs else None,
        )
        confs[BY_NAME["controller"].key] = controller.address
    else:  # a controller of the user's (or none)
        from statestore import auth, tls  # grpc loads only when replication is on

        if tls_files is not None:
            tls.use(tls_files)
        if confs.get(secret_key):
            auth.remember(confs[BY_NAME["controller"].key], confs[secret_key])
    if hasattr(builder_or_session, "getOrCreate"):
        builder = builder_or_session
        options = builder._options if hasattr(builder, "_options") else {}
        builder = builder.config("spark.jars", _with_jar(options.get("spark.jars"), jar_path))
        if int(confs[BY_NAME["replication_factor"].key]) > 0:
            # Each executor starts its state node as it starts (a replacement executor too).
            builder = builder.config("spark.plugins", _with_class(options.get("spark.plugins"), PLUGIN_CLASS))
        for key, value in confs.items():
            builder = builder.config(key, value)
        return builder
    session = builder_or_session
    session.sparkContext._jsc.addJar(jar_path)
    for key, value in confs.items():
        session.conf.set(key, value)
    return session


def _load_balancing(confs: dict[str, str]) -> Any:
    """The load-balancing policy's settings from the confs (already checked by `spark_confs`)."""
    from statestore.controller.load_balancer import BalancerSettings

    return BalancerSettings(
        mode=confs[BY_NAME["load_balancing"].key],
        imbalance_factor=float(confs[BY_NAME["load_balancing_factor"].key]),
        batches=int(confs[BY_NAME["load_balancing_batches"].key]),
        max_moves=int(confs[BY_NAME["load_balancing_max_moves"].key]),
    )
