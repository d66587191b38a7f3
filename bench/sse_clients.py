"""Load generator for the SSE fan-out bench: many raw-asyncio SSE connections per process.

A Python SSE client built on httpx spends more CPU per event than the gateway does to
send it, so 2,000 of them on the same two cores measure the clients, not the gateway.
Each connection here is a plain ``asyncio`` stream (uvloop when installed): one HTTP/1.1
``GET`` written by hand, then chunked frames read with ``readline``/``readexactly``. The
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

Sample = tuple[float, float]
"""(produced -> received ms, stored in Redis -> received ms) of one event."""


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


async def _watch(host: str, port: int, key: str, session_id: str, ready: Any) -> list[Sample]:
    samples: list[Sample] = []
    released = False
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 120)
        try:
            writer.write(_request(host, port, key, session_id))
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 120)
            status = head.split(b" ", 2)[1]
            if status != b"200":
                raise RuntimeError(f"stream answered {status.decode()}")
            async for frame, now in _frames(reader):
                kind, data, entry_id = _parse(frame)
                if kind == "turn_started":
                    ready.release()
                    released = True
                elif kind == "thought":
                    produced = datetime.fromisoformat(json.loads(data)["time"]).timestamp()
                    stored = int(entry_id.split("-")[0]) / 1000
                    samples.append(((now - produced) * 1000, (now - stored) * 1000))
                elif kind == "complete":
                    break
        finally:
            writer.close()
    finally:
        if not released:
            ready.release()  # a failed client must not hold the round up
    return samples


def _request(host: str, port: int, key: str, session_id: str) -> bytes:
    return (
        f"GET /api/v1/sessions/{session_id}/stream HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\nAuthorization: Bearer {key}\r\n"
        "Accept: text/event-stream\r\n\r\n"
    ).encode()


async def _frames(reader: asyncio.StreamReader) -> Any:
    """SSE frames of a chunked response, each with its arrival time (epoch seconds)."""
    buffer = b""
    while True:
        size_line = await reader.readline()
        if not size_line:
            return
        size = int(size_line.strip() or b"0", 16)
        chunk = await reader.readexactly(size + 2)
        now = time.time()
        if size == 0:
            return
        buffer += chunk[:-2]
        while b"\n\n" in buffer or b"\r\n\r\n" in buffer:
            frame, buffer = _split(buffer)
            yield frame, now


def _split(buffer: bytes) -> tuple[bytes, bytes]:
    lf, crlf = buffer.find(b"\n\n"), buffer.find(b"\r\n\r\n")
    if crlf != -1 and (lf == -1 or crlf < lf):
        return buffer[:crlf], buffer[crlf + 4 :]
    return buffer[:lf], buffer[lf + 2 :]


def _parse(frame: bytes) -> tuple[str, str, str]:
    """(event, data, id) of one frame; comments (heartbeats) give empty fields."""
    kind = data = entry_id = ""
    for line in frame.decode().splitlines():
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            kind = value
        elif name == "data":
            data = value
        elif name == "id":
            entry_id = value
    return kind, data, entry_id
