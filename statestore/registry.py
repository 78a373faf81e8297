"""Where an operator's `statestore status` (move, drain, rebalance) finds the controller of a running application
without being told: each controller on a host registers itself in a file readable by its user only, and the
Spark UI's REST API names an application's controller among its confs.

A registration is `$STATESTORE_HOME/controllers/<pid>.json` (`~/.statestore` by default; the directory 0700, the
file 0600, since it holds the application's secret): `{"address", "secret", "pid", "application",
"application_id", "spark_ui", "tls", "started"}` (Spark's application id and UI once the driver's JVM announced them;
the paths of the TLS files it serves with, by their variables' names, so that a client on the host calls it over
TLS). It
is removed when the controller stops; one whose process is gone is ignored and removed by the next reader.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

HOME_ENV = "STATESTORE_HOME"
CONTROLLER_CONF = "spark.sql.streaming.stateStore.statestore.controller"


class ControllerNotFound(ValueError):
    """No single controller could be chosen; the message says what was looked at and what to give instead."""


@dataclass(frozen=True)
class Registration:
    """One running controller on this host."""

    address: str
    secret: str
    pid: int
    application: str
    started: float
    application_id: str = ""  # Spark's, once the driver announced it
    spark_ui: str = ""
    tls: dict[str, str] | None = None  # the TLS files it serves with (statestore.tls.environment), None: plaintext

    def describe(self) -> str:
        """One line for a list an operator chooses from (no secret)."""
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        spark = "  ".join(part for part in (self.application_id, self.spark_ui) if part)
        return (
            f"{self.address}  pid {self.pid}  {self.application or '(unnamed application)'}"
            f"{'  ' + spark if spark else ''}  since {when}"
        )


def registry_dir() -> Path:
    """The directory of this user's registrations."""
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".statestore") / "controllers"


def register(
    address: str,
    secret: str,
    application: str = "",
    application_id: str = "",
    spark_ui: str = "",
    tls: dict[str, str] | None = None,
) -> Path:
    """Register the controller serving at `address` in this process (again: the registration is replaced);
    returns the file (remove it with `unregister`). A wildcard listen host is registered as loopback, where this
    host reaches it."""
    host, _, port = address.rpartition(":")
    if host in ("0.0.0.0", "[::]", "::", ""):
        address = f"127.0.0.1:{port}"
    directory = registry_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / f"{os.getpid()}.json"
    staged = directory / f".{os.getpid()}.json.tmp"
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(
            {
                "address": address,
                "secret": secret,
                "pid": os.getpid(),
                "application": application,
                "application_id": application_id,
                "spark_ui": spark_ui,
                "tls": tls or {},
                "started": _started(),
            },
            out,
        )
    staged.replace(path)
    return path


_STARTED: list[float] = []


def _started() -> float:
    """When this process first registered (kept when it registers again)."""
    if not _STARTED:
        _STARTED.append(time.time())
    return _STARTED[0]


def unregister(path: Path) -> None:
    """Remove a registration (nothing if it is gone)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def running() -> list[Registration]:
    """The registered controllers whose process still runs, oldest first (stale files are removed)."""
    found = []
    directory = registry_dir()
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            registration = Registration(
                str(entry["address"]),
                str(entry.get("secret", "")),
                int(entry["pid"]),
                str(entry.get("application", "")),
                float(entry.get("started", 0)),
                str(entry.get("application_id", "")),
                str(entry.get("spark_ui", "")),
                {str(k): str(v) for k, v in (entry.get("tls") or {}).items()} or None,
            )
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _alive(registration.pid):
            found.append(registration)
        else:
            unregister(path)
    return sorted(found, key=lambda r: r.started)


def registered_at(address: str) -> Registration | None:
    """The registration of the controller at `address` (None if none): the one with that address, else the only
    one on its port (a controller registered at its listen address, called at its advertised one)."""
    registered = running()
    for registration in registered:
        if registration.address == address:
            return registration
    port = address.rpartition(":")[2]
    on_port = [r for r in registered if r.address.rpartition(":")[2] == port]
    return on_port[0] if len(on_port) == 1 else None


def secret_of(address: str) -> str:
    """The secret registered for the controller at `address` ("" if none is)."""
    registration = registered_at(address)
    return registration.secret if registration is not None else ""


def controller_from_spark_ui(url: str, timeout: float = 5.0) -> str:
    """The `controller` conf of the application the Spark UI at `url` serves (its REST API's environment)."""
    base = url.rstrip("/")
    try:
        applications = _get_json(f"{base}/api/v1/applications", timeout)
        if not applications:
            raise ControllerNotFound(f"the Spark UI at {url} lists no application")
        application = applications[0]["id"]
        environment = _get_json(f"{base}/api/v1/applications/{application}/environment", timeout)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ControllerNotFound(f"cannot read the Spark UI's REST API at {url}: {exc}") from None
    for key, value in environment.get("sparkProperties", []):
        if key == CONTROLLER_CONF:
            return str(value)
    raise ControllerNotFound(
        f"application {application} at {url} has no {CONTROLLER_CONF} conf: it does not replicate its state with "
        "statestore (or started before its controller did)"
    )


def choose(controller: str | None, spark_ui: str | None) -> tuple[str, str | None]:
    """(address, the secret registered for it or None) of the controller an operator command should call:
    `controller` when given, else the Spark UI's application's, else the only one registered on this host.
    Raises ControllerNotFound saying what was looked at and what to give."""
    registered = running()
    if controller is None and spark_ui is not None:
        controller = controller_from_spark_ui(spark_ui)
    if controller is not None:
        return controller, secret_of(controller) or None
    if not registered:
        raise ControllerNotFound(
            f"no statestore controller runs on this host (none registered in {registry_dir()}): give "
            "--controller HOST:PORT (the application's spark.sql.streaming.stateStore.statestore.controller conf) "
            "or --spark-ui http://DRIVER:4040"
        )
    if len(registered) > 1:
        listed = "\n  ".join(r.describe() for r in registered)
        raise ControllerNotFound(
            f"{len(registered)} statestore controllers run on this host; choose one with --controller:\n  {listed}"
        )
    return registered[0].address, registered[0].secret


def _get_json(url: str, timeout: float) -> object:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        raise ValueError(f"{url} answered HTTP {exc.code}") from None


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
