"""TLS for our gRPC servers and clients: the application's certificate, its key and, optionally, the CA that signs
the certificates of every process of the application (then each side checks the other's: mutual TLS).

A process takes them from the environment (`STATESTORE_TLS_CERT`, `STATESTORE_TLS_KEY`, `STATESTORE_TLS_CA`: paths
to PEM files) unless it was given them explicitly (`use`: `enable()` in the driver). Unset: plaintext, as before.
docs/security.md says what TLS adds to the secret.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

import grpc

CERT_ENV, KEY_ENV, CA_ENV = "STATESTORE_TLS_CERT", "STATESTORE_TLS_KEY", "STATESTORE_TLS_CA"

_configured: TlsFiles | None = None
_lock = threading.Lock()


class TlsError(ValueError):
    """A TLS setting that cannot be used: names the setting or file and what is wrong."""


@dataclass(frozen=True)
class TlsFiles:
    """PEM files: this process's certificate chain and private key, and the CA its peers' certificates must be
    signed by (None: the peers are not asked for a certificate, and servers are checked against the system's
    roots)."""

    cert: Path
    key: Path
    ca: Path | None = None

    @staticmethod
    def of(cert: str | None, key: str | None, ca: str | None, source: str) -> TlsFiles | None:
        """The files named by `cert`, `key` and `ca` (None when none is named); `source` names where they were
        set, for the error when only some are."""
        if not cert and not key and not ca:
            return None
        if not cert or not key:
            raise TlsError(f"{source}: TLS needs both a certificate and its key (got cert={cert!r}, key={key!r})")
        files = TlsFiles(Path(cert), Path(key), Path(ca) if ca else None)
        for path in (files.cert, files.key, files.ca):
            if path is not None and not path.is_file():
                raise TlsError(f"{source}: TLS file {path} does not exist or is not a file")
        return files

    def _read(self, path: Path) -> bytes:
        try:
            return path.read_bytes()
        except OSError as exc:
            raise TlsError(f"TLS file {path}: {exc.strerror or exc}") from None

    def server_credentials(self) -> grpc.ServerCredentials:
        """Credentials for a server: it presents the certificate and, with a CA, requires a client certificate
        signed by it."""
        ca = self._read(self.ca) if self.ca else None
        return grpc.ssl_server_credentials(
            [(self._read(self.key), self._read(self.cert))], root_certificates=ca, require_client_auth=ca is not None
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Credentials for a client: it checks the server's certificate against the CA and presents its own."""
        return grpc.ssl_channel_credentials(
            root_certificates=self._read(self.ca) if self.ca else None,
            private_key=self._read(self.key),
            certificate_chain=self._read(self.cert),
        )


def environment(files: TlsFiles | None) -> dict[str, str]:
    """The environment variables that give a child process `files` (none for None)."""
    if files is None:
        return {}
    named = {CERT_ENV: files.cert, KEY_ENV: files.key, CA_ENV: files.ca}
    return {name: str(path) for name, path in named.items() if path is not None}


def use(files: TlsFiles | None) -> None:
    """This process's servers and clients use `files` from now on (None: back to the environment's)."""
    global _configured
    with _lock:
        _configured = files


_by_address: dict[str, TlsFiles] = {}


def use_for(address: str, files: TlsFiles) -> None:
    """This process's clients call `address` (a controller of the user's) over TLS with `files`, whatever it uses
    elsewhere (statestore.auth.channel)."""
    with _lock:
        _by_address[address] = files


def for_address(address: str) -> TlsFiles | None:
    """The files `use_for` gave `address` (None if none)."""
    with _lock:
        return _by_address.get(address)


def current() -> TlsFiles | None:
    """The TLS files this process uses: those given to `use`, else the environment's, else None."""
    with _lock:
        if _configured is not None:
            return _configured
    environ = os.environ
    return TlsFiles.of(environ.get(CERT_ENV), environ.get(KEY_ENV), environ.get(CA_ENV), "environment STATESTORE_TLS_*")


def add_port(server: grpc.Server, listen: str) -> int:
    """Listen on `listen` with TLS when this process has TLS files, else in plaintext; returns the bound port."""
    files = current()
    return server.add_secure_port(listen, files.server_credentials()) if files else server.add_insecure_port(listen)
