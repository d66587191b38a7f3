"""EventStreamResponse: an SSE response whose frames the fan-out writes as they come.

At thousands of clients per process, what a delivery costs is the gateway's CPU budget.
Sending each frame as an ASGI message means waking the client's task, walking the
middleware's ``send`` wrappers and uvicorn's flow control for every client and event:
about 85 µs a delivery, measured. So when the server is uvicorn's httptools protocol
(what Weft runs), the response hands the fan-out a :class:`TransportSink` that writes the
HTTP chunk straight to the connection's transport, from the fan-out's own loop. The
response start, the trailer and the end of the body still go through ASGI ``send``, so
uvicorn's bookkeeping of the response stays right.

Any other server (and the in-process test client) gets a :class:`BufferedSink`: frames
are buffered and one writer task sends what has piled up as one ASGI message.

Either sink refuses a write once ``buffer_bytes`` are waiting for the client, which drops
that client alone. A send that cannot complete within ``send_timeout_s`` (the client
stopped reading and its socket buffer is full) ends that response; one watchdog task per
process checks every open response's send start time, instead of a timer per send.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from weft_gateway.fanout import Sink
from weft_gateway.sse_metrics import stream_closed, stream_opened

log = structlog.get_logger()

_SSE_HEADERS = {
    "Cache-Control": "no-store",
    "Connection": "keep-alive",
    "X-Accel-Buffering": "no",
}
_SERVER_SEND = "weft.server_send"
"""Scope key of the server's own ``send`` callable (see :class:`ExposeServerSend`)."""

Run = Callable[[Sink], Awaitable[bytes]]
"""Writes a stream's frames to the sink until it ends; returns the frames that close it."""


class ExposeServerSend:
    """Outermost ASGI wrapper: puts the server's own ``send`` into the scope, before any
    middleware wraps it, so an SSE response can find the connection it writes to."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope[_SERVER_SEND] = send
        await self.app(scope, receive, send)


class TransportSink:
    """Writes frames as HTTP/1.1 chunks straight to the connection's transport."""

    def __init__(self, transport: asyncio.WriteTransport, buffer_bytes: int):
        self._transport = transport
        self._limit = buffer_bytes

    def write(self, data: bytes) -> bool:
        transport = self._transport
        if transport.is_closing() or transport.get_write_buffer_size() > self._limit:
            return False
        transport.write(b"%x\r\n%b\r\n" % (len(data), data))
        return True


class BufferedSink:
    """Buffers frames for a writer task that sends them as ASGI messages."""

    def __init__(self, buffer_bytes: int):
        self._limit = buffer_bytes
        self._parts: list[bytes] = []
        self._size = 0
        self._ready = asyncio.Event()
        self._closed = False

    def write(self, data: bytes) -> bool:
        if self._size + len(data) > self._limit:
            return False
        self._parts.append(data)
        self._size += len(data)
        self._ready.set()
        return True

    def close(self) -> None:
        """No more writes: :meth:`take` returns what is left, then empty bytes."""
        self._closed = True
        self._ready.set()

    async def take(self) -> bytes:
        """Everything written since the last take (waits for it); empty once closed."""
        while not self._parts and not self._closed:
            self._ready.clear()
            await self._ready.wait()
        data = b"".join(self._parts)
        self._parts.clear()
        self._size = 0
        return data


def transport_sink(scope: Scope, buffer_bytes: int) -> TransportSink | None:
    """A direct sink when the server is uvicorn's httptools protocol and the response
    (already started) is chunked; None otherwise."""
    cycle = getattr(scope.get(_SERVER_SEND), "__self__", None)
    if type(cycle).__module__ != "uvicorn.protocols.http.httptools_impl":
        return None
    if getattr(cycle, "chunked_encoding", None) is not True:
        return None
    transport = getattr(cycle, "transport", None)
    return TransportSink(transport, buffer_bytes) if transport is not None else None


class EventStreamResponse(Response):
    """``text/event-stream`` written by ``run`` (the fan-out) through a sink."""

    media_type = "text/event-stream"

    def __init__(
        self,
        run: Run,
        *,
        send_timeout_s: float,
        buffer_bytes: int,
        headers: Mapping[str, str] | None = None,
        status_code: int = 200,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ):
        # FastAPI reads the default of ``status_code`` for the OpenAPI document.
        # Like StreamingResponse: no body, so no Content-Length header (chunked).
        self.status_code = status_code
        self.background = None
        self.init_headers({**_SSE_HEADERS, **(headers or {})})
        self._run = run
        self.buffer_bytes = buffer_bytes
        self.send_timeout_s = send_timeout_s
        self.sending_since = 0.0
        """Monotonic start of the send in progress, 0 when none (read by the watchdog)."""
        self.writer: asyncio.Task[None] | None = None
        self._on_close = on_close
        """Runs once the response is over, however it ended (frees the stream's slot)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Stream until the stream ends, the client disconnects or a send times out."""
        try:
            await self._serve(scope, receive, send)
        finally:
            if self._on_close is not None:
                await asyncio.shield(self._on_close())

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = {
            "type": "http.response.start",
            "status": self.status_code,
            "headers": self.raw_headers,
        }
        if scope.get("method") == "HEAD":
            await send(start)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        writer = self.writer = asyncio.create_task(self._write(scope, send, start))
        listener = asyncio.create_task(_until_disconnect(receive))
        _watchdog.watch(self)
        stream_opened()
        try:
            await asyncio.wait({writer, listener}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stream_closed()
            _watchdog.forget(self)
            for task in (writer, listener):
                task.cancel()
            await asyncio.gather(writer, listener, return_exceptions=True)
        failure = None if writer.cancelled() else writer.exception()
        if failure is not None:
            raise failure

    async def _write(self, scope: Scope, send: Send, start: Message) -> None:
        try:
            await self._send(send, start)
            direct = transport_sink(scope, self.buffer_bytes)
            trailer = await (self._run(direct) if direct else self._buffered(send))
            await self._send(send, _body(trailer, more=False))
        except OSError:
            pass  # the connection went away under the send; nothing left to tell it

    async def _buffered(self, send: Send) -> bytes:
        sink = BufferedSink(self.buffer_bytes)

        async def pump() -> None:
            while data := await sink.take():
                await self._send(send, _body(data, more=True))

        pumping = asyncio.create_task(pump())
        try:
            trailer = await self._run(sink)
            sink.close()
            await pumping
            return trailer
        finally:
            pumping.cancel()

    async def _send(self, send: Send, message: Message) -> None:
        self.sending_since = time.monotonic()
        await send(message)
        self.sending_since = 0.0


def _body(data: bytes, *, more: bool) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": more}


class _SendWatchdog:
    """Cancels the writer of any response whose current send is older than its timeout."""

    def __init__(self, period_s: float = 0.5):
        self._period = period_s
        self._open: set[EventStreamResponse] = set()
        self._task: asyncio.Task[None] | None = None

    def watch(self, response: EventStreamResponse) -> None:
        self._open.add(response)
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._task = loop.create_task(self._run())

    def forget(self, response: EventStreamResponse) -> None:
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
