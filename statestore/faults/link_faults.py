"""Network faults on the links into a state node, for the fault suite: with `STATESTORE_LINK_FAULTS_FILE` set,
a node puts a fault proxy (`statestore.faults.proxy`) in front of its own gRPC port and advertises the proxy, so
that everything its peers send it (replicated increments, pulls, bootstraps) crosses it. The file holds the
fault every such proxy applies now, one line `<fault> [millis|every]` (`cut`, `delay 300`, `corrupt 3`;
`pass` or no file: none), looked at every `POLL_SECONDS`. Off (no proxy, nothing looked at) unless the
variable is set."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from statestore.faults.proxy import FaultProxy
from statestore.logs import log_event

LINK_FAULTS_ENV = "STATESTORE_LINK_FAULTS_FILE"
POLL_SECONDS = 0.2
_log = logging.getLogger("statestore.faults.links")


def parse(line: str) -> tuple[str, int, int]:
    """(fault, millis, every) of a link-faults line; ("pass", 0, 1) for an empty one. Raises ValueError."""
    words = line.split()
    if not words:
        return "pass", 0, 1
    number = int(words[1]) if len(words) > 1 else 0
    if words[0] == "delay":
        return "delay", number, 1
    return words[0], 0, max(number, 1)


def proxied_inbound(listen: str, host: str) -> str | None:
    """When `STATESTORE_LINK_FAULTS_FILE` is set: start a proxy on `host` in front of `listen`, following the
    file, and return the address to advertise; else None."""
    path = os.environ.get(LINK_FAULTS_ENV)
    if not path:
        return None
    proxy = FaultProxy(listen, f"{host}:0", name=f"into {listen}")
    address = proxy.start()
    threading.Thread(target=_follow, args=(Path(path), proxy), name="link-faults", daemon=True).start()
    log_event(_log, "link_fault_proxy", logging.WARNING, listen=listen, advertised=address, file=path)
    return address


def _follow(path: Path, proxy: FaultProxy) -> None:
    applied = None
    while True:
        try:
            line = path.read_text().strip() if path.exists() else ""
        except OSError:
            line = ""
        if line != applied:
            try:
                kind, millis, every = parse(line)
                proxy.set(kind, millis=millis, every=every)
            except ValueError as exc:
                log_event(_log, "link_fault_refused", logging.ERROR, line=line, error=str(exc))
            applied = line
        threading.Event().wait(POLL_SECONDS)
