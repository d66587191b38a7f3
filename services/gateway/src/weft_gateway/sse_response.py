"""FrameStreamResponse: an SSE response that writes already encoded frames.

``sse_starlette.EventSourceResponse`` encodes every event for every client and runs four
tasks and a cancel scope per send; at thousands of clients that per-client work is most
of the gateway's CPU. Here the fan-out hands each client the same frame bytes
(:func:`weft_gateway.sse.frame`) and heartbeats come from the fan-out's timer, so a
connection costs two tasks (the writer and a disconnect listener) and a send costs one
ASGI message. A send that cannot complete within ``send_timeout_s`` (the client stopped
reading and its socket buffer is full) ends the response, so one stuck client never
holds anything else up.
"""

from __future__ import annotations

import asyncio
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
    ):
        # Like StreamingResponse: no body, so no Content-Length header.
        self.status_code = 200
        self.background = None
        self.init_headers({**_SSE_HEADERS, **(headers or {})})
        self._frames = frames
        self._send_timeout = send_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Stream until the frames end, the client disconnects or a send times out."""
        start = {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
        if scope.get("method") == "HEAD":
            await send(start)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        writer = asyncio.create_task(self._write(send, start))
        listener = asyncio.create_task(_until_disconnect(receive))
        try:
            await asyncio.wait({writer, listener}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (writer, listener):
                task.cancel()
            await asyncio.gather(writer, listener, return_exceptions=True)
            await self._frames.aclose()  # type: ignore[attr-defined]
        if not writer.cancelled() and writer.exception() is not None:
            raise writer.exception()  # type: ignore[misc]

    async def _write(self, send: Send, start: object) -> None:
        try:
            async with asyncio.timeout(self._send_timeout):
                await send(start)  # type: ignore[arg-type]
            async for chunk in self._frames:
                async with asyncio.timeout(self._send_timeout):
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            async with asyncio.timeout(self._send_timeout):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except TimeoutError:
            log.info("sse_client_dropped", reason="send_timeout", seconds=self._send_timeout)
        except OSError:
            pass  # the connection went away under the send; nothing left to tell it


async def _until_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
