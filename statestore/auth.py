"""Who may call our gRPC servers: the processes of one application, which share its secret.

`enable()` makes a secret per application (or takes Spark's `spark.authenticate.secret`); the driver's controller
gets it directly, executors in a conf Spark redacts, and each state node from its executor in the environment
(`STATESTORE_SECRET`, never the command line, which any local user can read). A server with a secret answers a
call only when it carries the same secret (`authorization: Bearer <secret>` metadata, compared in constant time);
any other call ends with UNAUTHENTICATED, logged with the caller's address and the method. A server without a
secret (a test cluster, a node run by hand) accepts every call, as before. docs/security.md has the threat model.
"""

from __future__ import annotations

import hmac
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from statestore import tls
from statestore.logs import log_event
from statestore.secret_option import SECRET_ENV, secret_from_env
from statestore.tls import TlsFiles

__all__ = ["SECRET_ENV", "SecretCheck", "channel", "forget", "remember", "secret_for", "secret_from_env",
           "server_interceptors"]  # fmt: skip
_HEADER = "authorization"
_SCHEME = "Bearer "
# Open to anyone: it says only whether the server serves.
_UNCHECKED_PREFIX = "/grpc.health.v1.Health/"

_log = logging.getLogger("statestore.auth")
_known: dict[str, str] = {}  # controller address -> its secret, for clients in the process that started it
_known_lock = threading.Lock()


def remember(address: str, secret: str) -> None:
    """Clients of this process calling `address` (a controller it started) send `secret`."""
    with _known_lock:
        _known[address] = secret


def forget(address: str) -> None:
    """Undo `remember` (the controller stopped)."""
    with _known_lock:
        _known.pop(address, None)


def secret_for(address: str) -> str:
    """The secret to send to `address`: the one remembered for it, else this process's environment's, else the
    one its controller registered on this host for its user (statestore.registry: a driver's Python process
    calling the controller its JVM started)."""
    with _known_lock:
        known = _known.get(address)
    if known is not None:
        return known
    from statestore.registry import secret_of

    return secret_from_env() or secret_of(address)


def _registered_tls(address: str) -> TlsFiles | None:
    from statestore.registry import registered_at

    registration = registered_at(address)
    if registration is None or not registration.tls:
        return None
    env = registration.tls
    return TlsFiles.of(env.get(tls.CERT_ENV), env.get(tls.KEY_ENV), env.get(tls.CA_ENV), f"registration of {address}")


def channel(
    address: str,
    options: Sequence[tuple[str, Any]] | None = None,
    secret: str | None = None,
    tls_files: TlsFiles | None = None,
) -> grpc.Channel:
    """A channel to `address` whose every call carries `secret` (default: `secret_for(address)`), over TLS with
    `tls_files` (default: this process's, statestore.tls, else those given for `address`, else those the
    controller at `address` registered on this host with, statestore.registry; none: plaintext)."""
    files = tls_files or tls.current() or tls.for_address(address) or _registered_tls(address)
    if files is not None:
        base = grpc.secure_channel(address, files.channel_credentials(), options=options)
    else:
        base = grpc.insecure_channel(address, options=options)
    secret = secret_for(address) if secret is None else secret
    return grpc.intercept_channel(base, _SecretClient(secret)) if secret else base


class _SecretClient(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    def __init__(self, secret: str) -> None:
        self._header = (_HEADER, _SCHEME + secret)

    def _with_secret(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        metadata = [*(details.metadata or []), self._header]
        wait_for_ready = getattr(details, "wait_for_ready", None)
        compression = getattr(details, "compression", None)
        return _CallDetails(details.method, details.timeout, metadata, details.credentials, wait_for_ready, compression)

    def intercept_unary_unary(self, continuation: Callable, details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._with_secret(details), request)

    def intercept_unary_stream(self, continuation: Callable, details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._with_secret(details), request)

    def intercept_stream_unary(self, continuation: Callable, details: grpc.ClientCallDetails, requests: Any) -> Any:
        return continuation(self._with_secret(details), requests)

    def intercept_stream_stream(self, continuation: Callable, details: grpc.ClientCallDetails, requests: Any) -> Any:
        return continuation(self._with_secret(details), requests)


class _CallDetails(grpc.ClientCallDetails):
    def __init__(self, method: str, timeout: Any, metadata: Any, credentials: Any, wait_for_ready: Any,
                 compression: Any) -> None:  # fmt: skip
        self.method = method
        self.timeout = timeout
        self.metadata = metadata
        self.credentials = credentials
        self.wait_for_ready = wait_for_ready
        self.compression = compression


class SecretCheck(grpc.ServerInterceptor):
    """Refuses (UNAUTHENTICATED) every call to this server that does not carry `secret`; `server` names the
    server in the log."""

    def __init__(self, secret: str, server: str) -> None:
        self._expected = (_SCHEME + secret).encode()
        self._server = server

    def intercept_service(self, continuation: Callable, details: grpc.HandlerCallDetails) -> Any:
        if details.method.startswith(_UNCHECKED_PREFIX):
            return continuation(details)
        supplied = dict(details.invocation_metadata or ()).get(_HEADER, "")
        if hmac.compare_digest(supplied.encode(), self._expected):
            return continuation(details)
        why = "no secret" if not supplied else "a wrong secret"
        handler = continuation(details)
        return _refusal(handler, f"{self._server}: the call to {details.method} carries {why}", details.method, why)


def _refusal(handler: Any, message: str, method: str, why: str) -> Any:
    """A handler of the same kind as `handler` that refuses the call with UNAUTHENTICATED."""

    def refuse(_request: Any, context: grpc.ServicerContext) -> Any:
        log_event(_log, "call_unauthenticated", logging.WARNING, method=method, peer=context.peer(), why=why)
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    if handler is None:
        return None  # an unknown method: gRPC answers UNIMPLEMENTED
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse)
    return grpc.unary_unary_rpc_method_handler(refuse)


def server_interceptors(secret: str, server: str) -> list[grpc.ServerInterceptor]:
    """The interceptors a server of ours runs with: the secret check when it has a secret."""
    return [SecretCheck(secret, server)] if secret else []
