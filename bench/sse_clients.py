"""Load generator for the SSE fan-out bench: many raw-asyncio SSE connections per process.

A Python SSE client built on httpx spends more CPU per event than the gateway does to
send it, so 2,000 of them on the same two cores measure the clients, not the gateway.
Each connection here is a plain ``asyncio`` protocol (uvloop when installed): one HTTP/1.1
``GET`` written by hand, then chunked frames parsed in ``data_received``. The
receipt time is taken when a frame's bytes arrive, before any parsing, and the event's
JSON is parsed only to read its ``time`` (set when the event was produced).

Every process reports its CPU seconds so the bench can show the load it put on the
machine next to the gateway's.
"""

from __future__ import annotations

import asyncio
import json
import resource
import time
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

try:  # the gateway's dependency; the bench falls back to asyncio without it
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None  # type: ignore[assignment]

Sample = float
"""Produced -> received ms of one event (the stream's entry ids are the events' ``seq``
now, no longer Redis's milliseconds, so the split at Redis cannot be read from them)."""


def client_proc(
    base_url: str, key: str, sessions: list[str], count: int, ready: Any, out: Any
) -> None:
    """Entry point of one client process: ``count`` SSE streams spread over ``sessions``."""
    runner = uvloop.run if uvloop is not None else asyncio.run
    started = resource.getrusage(resource.RUSAGE_SELF)
    result = runner(_clients(base_url, key, sessions, count, ready))
    used = resource.getrusage(resource.RUSAGE_SELF)
    result["cpu_s"] = (used.ru_utime - started.ru_utime) + (used.ru_stime - started.ru_stime)
    out.put(result)


async def _clients(
    base_url: str, key: str, sessions: list[str], count: int, ready: Any
) -> dict[str, Any]:
    url = urlsplit(base_url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    results = await asyncio.gather(
        *(_watch(host, port, key, sessions[i % len(sessions)], ready) for i in range(count)),
        return_exceptions=True,
    )
    samples = [s for r in results if isinstance(r, list) for s in r]
    errors = [repr(r)[:200] for r in results if isinstance(r, BaseException)]
    return {"latencies": samples, "errors": errors}


class _SseProtocol(asyncio.Protocol):
    """One SSE connection read with ``data_received`` (no stream reader, no task per
    read): the HTTP head, then chunked frames, each stamped with its arrival time."""

    def __init__(self, ready: Any):
        self.ready = ready
        self.released = False
        self.samples: list[Sample] = []
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.buffer = b""
        self.head = True
        self.body = b""

    def data_received(self, data: bytes) -> None:
        now = time.time()
        self.buffer += data
        if self.head:
            end = self.buffer.find(b"\r\n\r\n")
            if end == -1:
                return
            status = self.buffer.split(b" ", 2)[1]
            if status != b"200":
                self._finish(RuntimeError(f"stream answered {status.decode()}"))
                return
            self.head, self.buffer = False, self.buffer[end + 4 :]
        while not self.done.done():  # whole chunks: b"<hex size>\r\n<data>\r\n"
            line_end = self.buffer.find(b"\r\n")
            if line_end == -1:
                return
            size = int(self.buffer[:line_end] or b"0", 16)
            chunk_end = line_end + 2 + size + 2
            if len(self.buffer) < chunk_end:
                return
            if size == 0:
                self._finish(None)
                return
            self.body += self.buffer[line_end + 2 : chunk_end - 2]
            self.buffer = self.buffer[chunk_end:]
            while b"\r\n\r\n" in self.body or b"\n\n" in self.body:
                frame, self.body = _split(self.body)
                self._frame(frame, now)

    def _frame(self, frame: bytes, now: float) -> None:
        kind, data = _parse(frame)
        if kind == "turn_started":
            self._release()
        elif kind == "thought":
            produced = datetime.fromisoformat(json.loads(data)["time"]).timestamp()
            self.samples.append((now - produced) * 1000)
        elif kind == "complete":
            self._finish(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish(exc)

    def _release(self) -> None:
        if not self.released:
            self.released = True
            self.ready.release()

    def _finish(self, exc: Exception | None) -> None:
        self._release()  # a failed client must not hold the round up
        if not self.done.done():
            if exc is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(exc)


async def _watch(host: str, port: int, key: str, session_id: str, ready: Any) -> list[Sample]:
    loop = asyncio.get_running_loop()
    protocol = _SseProtocol(ready)
    try:
        transport, _ = await asyncio.wait_for(
            loop.create_connection(lambda: protocol, host, port), 120
        )
    except BaseException:
        protocol._release()
        raise
    try:
        transport.write(_request(host, port, key, session_id))
        await protocol.done
    finally:
        transport.close()
    return protocol.samples


def _request(host: str, port: int, key: str, session_id: str) -> bytes:
    return (
        f"GET /api/v1/sessions/{session_id}/stream HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\nAuthorization: Bearer {key}\r\n"
        "Accept: text/event-stream\r\n\r\n"
    ).encode()


def _split(buffer: bytes) -> tuple[bytes, bytes]:
    lf, crlf = buffer.find(b"\n\n"), buffer.find(b"\r\n\r\n")
    if crlf != -1 and (lf == -1 or crlf < lf):
        return buffer[:crlf], buffer[crlf + 4 :]
    return buffer[:lf], buffer[lf + 2 :]


def _parse(frame: bytes) -> tuple[str, str]:
    """(event, data) of one frame; comments (heartbeats) give empty fields."""
    kind = data = ""
    for line in frame.decode().splitlines():
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            kind = value
        elif name == "data":
            data = value
    return kind, data
