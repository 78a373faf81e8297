"""A TCP proxy on loopback that disturbs the traffic between two of our processes, without root (the kernel's
`tc netem` is not available everywhere): put it between a node and the address its peers or its controller use,
then change its fault at any time.

Faults (`FaultProxy.set`), applied to every chunk of bytes in both directions:

- `pass`: forward unchanged.
- `delay`: hold each chunk `millis` before forwarding it (latency; order kept).
- `drop`: swallow every byte; connections stay open and silent (a black hole: callers wait for their deadlines).
- `corrupt`: flip one bit in every `every`-th chunk (the transport or our checksums must notice).
- `duplicate`: send every `every`-th chunk twice.
- `reorder`: hold every `every`-th chunk back and send it after the next one.
- `cut`: close every open connection now and each new one as it comes (a partition; refused connections).

`statestore proxy --listen HOST:PORT --target HOST:PORT` runs one from the command line (tests and the fault suite
use the class). Every change of fault is logged with the connections it met.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from dataclasses import dataclass

from statestore.logs import log_event

_log = logging.getLogger("statestore.faults.proxy")
FAULTS = ("pass", "delay", "drop", "corrupt", "duplicate", "reorder", "cut")
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class Fault:
    """What the proxy does to the traffic now."""

    kind: str = "pass"
    millis: int = 0  # delay
    every: int = 1  # corrupt, duplicate, reorder: every n-th chunk

    def __post_init__(self) -> None:
        if self.kind not in FAULTS:
            raise ValueError(f"fault {self.kind!r}: expected one of {', '.join(FAULTS)}")
        if self.millis < 0 or self.every < 1:
            raise ValueError(f"fault {self.kind}: millis must be at least 0 and every at least 1")


class FaultProxy:
    """Forwards connections from `listen` (port 0: any free one) to `target`, disturbed by the current fault."""

    def __init__(self, target: str, listen: str = "127.0.0.1:0", name: str = "") -> None:
        self.target = target
        self._listen = listen
        self.name = name or f"proxy to {target}"
        self.fault = Fault()
        self.chunks = 0  # chunks forwarded or disturbed, both directions
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"fault-proxy {self.name}", daemon=True)
        self.address = ""

    def start(self) -> str:
        """Listen; returns the address to give the callers (host:port)."""
        self._thread.start()
        host, _, port = self._listen.rpartition(":")
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accept, host, int(port)), self._loop
        ).result(10)
        bound = self._server.sockets[0].getsockname()
        self.address = f"{bound[0]}:{bound[1]}"
        log_event(_log, "proxy_listening", proxy=self.name, address=self.address, target=self.target)
        return self.address

    def set(self, kind: str, millis: int = 0, every: int = 1) -> None:
        """Apply fault `kind` from now on (a `cut` also closes the connections open now)."""
        fault = Fault(kind, millis, every)
        self.fault = fault
        open_now = len(self._writers)
        if kind == "cut":
            asyncio.run_coroutine_threadsafe(self._close_all(), self._loop).result(10)
        log_event(_log, "proxy_fault", proxy=self.name, fault=kind, millis=millis, every=every, connections=open_now)

    def stop(self) -> None:
        """Close every connection and stop listening."""
        if self._server is None:
            return

        async def shut() -> None:
            self._server.close()
            await self._close_all()

        asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._server = None

    async def _close_all(self) -> None:
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        if self.fault.kind == "cut":
            client_writer.close()
            return
        host, _, port = self.target.rpartition(":")
        try:
            target_reader, target_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            client_writer.close()
            return
        self._writers.update((client_writer, target_writer))
        await asyncio.gather(
            self._pump(client_reader, target_writer), self._pump(target_reader, client_writer), return_exceptions=True
        )
        for writer in (client_writer, target_writer):
            self._writers.discard(writer)
            writer.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held: bytes | None = None  # reorder: the chunk waiting for its successor
        count = 0
        try:
            while data := await reader.read(_CHUNK):
                count += 1
                self.chunks += 1
                fault = self.fault
                if fault.kind == "cut":
                    break
                if fault.kind == "drop":
                    continue
                if fault.kind == "delay" and fault.millis:
                    await asyncio.sleep(fault.millis / 1000)
                if fault.kind == "corrupt" and count % fault.every == 0:
                    middle = len(data) // 2
                    data = data[:middle] + bytes([data[middle] ^ 0x10]) + data[middle + 1 :]
                if fault.kind == "reorder" and count % fault.every == 0 and held is None:
                    held = data
                    continue
                writer.write(data)
                if fault.kind == "duplicate" and count % fault.every == 0:
                    writer.write(data)
                if held is not None:
                    writer.write(held)
                    held = None
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()
