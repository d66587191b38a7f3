"""SSE frames written straight to uvicorn's transport (the fan-out's direct path), on a
real uvicorn server with the httptools protocol, as the gateway runs it."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from weft_gateway.fanout import Sink
from weft_gateway.sse_response import EventStreamResponse, ExposeServerSend
from weft_platform.http_tracing import TracingMiddleware

FRAMES = [b"id: 1-0\r\nevent: thought\r\ndata: {}\r\n\r\n", b": ping\r\n\r\n"]


class WrapSend:
    """A middleware that wraps ``send``, as Starlette's own and most others do."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def wrapped(message: Message) -> None:
            await send(message)

        await self.app(scope, receive, wrapped)


async def _serve(app: ASGIApp) -> AsyncIterator[int]:
    config = uvicorn.Config(app, host="127.0.0.1", port=0, http="httptools", log_config=None)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.01)
    yield server.servers[0].sockets[0].getsockname()[1]
    server.should_exit = True
    await asyncio.wait_for(task, 10)


@pytest.fixture
async def served() -> AsyncIterator[tuple[int, dict[str, object]]]:
    seen: dict[str, object] = {}
    refused = asyncio.Event()
    seen["refused"] = refused

    async def events(request: Request) -> EventStreamResponse:
        mode = request.query_params.get("mode", "frames")

        async def run(sink: Sink) -> bytes:
            seen["sink"] = type(sink).__name__
            if mode == "flood":  # a client that never reads: write until refused
                for count in range(4000):
                    if not sink.write(b"data: " + b"x" * 65_536 + b"\r\n\r\n"):
                        seen["refused_after"] = count
                        refused.set()
                        return b""
                    await asyncio.sleep(0)
                return b""
            for data in FRAMES:
                assert sink.write(data)
            return b"event: complete\r\ndata: {}\r\n\r\n"

        return EventStreamResponse(run, send_timeout_s=0.5, buffer_bytes=256 * 1024)

    # As run_service serves the gateway: the platform's tracing middleware outermost.
    inner = ExposeServerSend(WrapSend(Starlette(routes=[Route("/events", events)])))
    app = TracingMiddleware(inner, access_log=True, trust_incoming=False)
    async for port in _serve(app):
        yield port, seen


async def test_frames_go_straight_to_the_transport_as_http_chunks(
    served: tuple[int, dict[str, object]],
) -> None:
    """Behind a middleware that wraps ``send``, the response still finds uvicorn's
    connection, writes the frames as chunks, and ends the body through ASGI."""
    port, seen = served
    async with httpx.AsyncClient() as client:
        response = await client.get(f"http://127.0.0.1:{port}/events", timeout=5)
    assert response.status_code == 200
    assert response.headers["transfer-encoding"] == "chunked"
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.content == b"".join(FRAMES) + b"event: complete\r\ndata: {}\r\n\r\n"
    assert seen["sink"] == "TransportSink"


async def test_a_client_that_never_reads_is_refused_and_its_response_ends(
    served: tuple[int, dict[str, object]],
) -> None:
    """The transport's buffer limit drops a stalled client (invariant 6); its response
    ends within the send timeout instead of holding a task forever."""
    port, seen = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    writer.write(b"GET /events?mode=flood HTTP/1.1\r\nHost: t\r\n\r\n")
    await writer.drain()
    refused = seen["refused"]
    assert isinstance(refused, asyncio.Event)
    await asyncio.wait_for(refused.wait(), 10)
    assert seen["sink"] == "TransportSink"
    assert isinstance(seen["refused_after"], int)
    writer.close()
    reader.feed_eof()
