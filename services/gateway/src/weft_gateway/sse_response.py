"""FrameStreamResponse: an SSE response that writes already encoded frames.

``sse_starlette.EventSourceResponse`` encodes every event for every client and runs four
tasks and a cancel scope per send; at thousands of clients that per-client work is most
of the gateway's CPU. Here the fan-out hands each client the same frame bytes
(:func:`weft_gateway.sse.frame`) and heartbeats come from the fan-out's timer, so a
connection costs two tasks (the writer and a disconnect listener) and a send costs one
ASGI message and two clock reads.

A send that cannot complete within ``send_timeout_s`` (the client stopped reading and its
socket buffer is full) ends that response, so one stuck client never holds anything else
up. One watchdog task per process checks every open response's send start time, instead
of a timer per send: profiling 2,000 clients showed per-send ``asyncio.timeout`` taking
more CPU than everything else in the gateway together.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping

import structlog
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

log = structlog.get_logger()

_SSE_HEADERS = {
    "Cache-Control": "no-store",
    "Connection": "keep-alive",
    "X-Accel-Buffering": "no",
}


class FrameStreamResponse(Response):
    """``text/event-stream`` from an async iterator of encoded frames."""

    media_type = "text/event-stream"

    def __init__(
        self,
        frames: AsyncIterator[bytes],
        *,
        send_timeout_s: float,
        headers: Mapping[str, str] | None = None,
        status_code: int = 200,
    ):
        # FastAPI reads the default of ``status_code`` for the OpenAPI document.
        # Like StreamingResponse: no body, so no Content-Length header.
        self.status_code = status_code
        self.background = None
        self.init_headers({**_SSE_HEADERS, **(headers or {})})
        self._frames = frames
        self.send_timeout_s = send_timeout_s
        self.sending_since = 0.0
        """Monotonic start of the send in progress, 0 when none (read by the watchdog)."""
        self.writer: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Stream until the frames end, the client disconnects or a send times out."""
        start = {
            "type": "http.response.start",
            "status": self.status_code,
            "headers": self.raw_headers,
        }
        if scope.get("method") == "HEAD":
            await send(start)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        writer = self.writer = asyncio.create_task(self._write(send, start))
        listener = asyncio.create_task(_until_disconnect(receive))
        _watchdog.watch(self)
        try:
            await asyncio.wait({writer, listener}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            _watchdog.forget(self)
            for task in (writer, listener):
                task.cancel()
            await asyncio.gather(writer, listener, return_exceptions=True)
            await self._frames.aclose()  # type: ignore[attr-defined]
        if not writer.cancelled() and writer.exception() is not None:
            raise writer.exception()  # type: ignore[misc]

    async def _write(self, send: Send, start: object) -> None:
        try:
            await self._send(send, start)
            async for chunk in self._frames:
                await self._send(
                    send, {"type": "http.response.body", "body": chunk, "more_body": True}
                )
            await self._send(send, {"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the connection went away under the send; nothing left to tell it

    async def _send(self, send: Send, message: object) -> None:
        self.sending_since = time.monotonic()
        await send(message)  # type: ignore[arg-type]
        self.sending_since = 0.0


class _SendWatchdog:
    """Cancels the writer of any response whose current send is older than its timeout."""

    def __init__(self, period_s: float = 0.5):
        self._period = period_s
        self._open: set[FrameStreamResponse] = set()
        self._task: asyncio.Task[None] | None = None

    def watch(self, response: FrameStreamResponse) -> None:
        self._open.add(response)
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._task = loop.create_task(self._run())

    def forget(self, response: FrameStreamResponse) -> None:
        self._open.discard(response)

    async def _run(self) -> None:
        while self._open:
            await asyncio.sleep(self._period)
            now = time.monotonic()
            for response in list(self._open):
                since = response.sending_since
                if since and now - since > response.send_timeout_s and response.writer:
                    log.info("sse_client_dropped", reason="send_timeout", seconds=now - since)
                    self._open.discard(response)
                    response.writer.cancel()


_watchdog = _SendWatchdog()


async def _until_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
