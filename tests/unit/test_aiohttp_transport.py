"""weft_platform.aiohttp_transport keeps httpx's contract over aiohttp's connections:
bodies and headers both ways, streamed and encoded responses, timeouts and refused
connections as httpx errors, redirects left to httpx, one pool per event loop. Each test
talks to a real HTTP server on a local socket (aiohttp's), no infrastructure."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
from collections.abc import AsyncIterator

import httpx
import pytest
from aiohttp import web
from weft_platform.aiohttp_transport import AiohttpTransport


async def _echo(request: web.Request) -> web.Response:
    body = await request.read()
    return web.json_response(
        {
            "method": request.method,
            "path": request.path_qs,
            "body": body.decode(),
            "authorization": request.headers.get("Authorization"),
            "content_length": request.headers.get("Content-Length"),
            "host": request.headers.get("Host"),
        },
        headers={"X-Weft-File-Name": "a%20b.txt"},
    )


async def _stream(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()
    await resp.prepare(request)
    for i in range(3):
        await resp.write(f"part{i};".encode())
        await asyncio.sleep(0.01)
    await resp.write_eof()
    return resp


async def _gzipped(_: web.Request) -> web.Response:
    return web.Response(
        body=gzip.compress(b'{"ok": true}'),
        headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
    )


async def _slow(_: web.Request) -> web.Response:
    await asyncio.sleep(0.8)
    return web.Response(text="late")


async def _redirect(_: web.Request) -> web.Response:
    raise web.HTTPSeeOther("/echo")


@pytest.fixture
async def server() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_route("*", "/echo", _echo)
    app.router.add_get("/stream", _stream)
    app.router.add_get("/gzip", _gzipped)
    app.router.add_get("/slow", _slow)
    app.router.add_get("/redirect", _redirect)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_a_json_request_and_its_answer_go_through_whole(server: str) -> None:
    async with httpx.AsyncClient(base_url=server, transport=AiohttpTransport()) as client:
        resp = await client.post(
            "/echo", params={"tenant_id": "t 1"}, json={"query": "é" * 3},
            headers={"Authorization": "Bearer tok"},
        )  # fmt: skip
    assert resp.status_code == 200
    seen = resp.json()
    assert seen["method"] == "POST"
    assert seen["path"] == "/echo?tenant_id=t+1"
    assert json.loads(seen["body"]) == {"query": "ééé"}
    assert seen["authorization"] == "Bearer tok"
    assert seen["content_length"] == str(len(seen["body"].encode()))
    assert seen["host"] == server.removeprefix("http://")
    assert resp.headers["x-weft-file-name"] == "a%20b.txt"


async def test_a_streamed_answer_arrives_in_its_parts(server: str) -> None:
    client = httpx.AsyncClient(base_url=server, transport=AiohttpTransport())
    async with client, client.stream("GET", "/stream") as resp:
        parts = [chunk async for chunk in resp.aiter_bytes()]
    assert b"".join(parts) == b"part0;part1;part2;"


async def test_an_encoded_answer_is_decoded_once_by_httpx(server: str) -> None:
    async with httpx.AsyncClient(base_url=server, transport=AiohttpTransport()) as client:
        resp = await client.get("/gzip")
    assert resp.json() == {"ok": True}


async def test_a_slow_answer_times_out_as_httpx_says(server: str) -> None:
    async with httpx.AsyncClient(
        base_url=server, transport=AiohttpTransport(), timeout=0.2
    ) as client:
        with pytest.raises(httpx.TimeoutException):
            await client.get("/slow")


async def test_a_refused_connection_is_an_httpx_connect_error() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with httpx.AsyncClient(transport=AiohttpTransport()) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"http://127.0.0.1:{port}/")


async def test_redirects_are_httpxs_to_follow(server: str) -> None:
    async with httpx.AsyncClient(base_url=server, transport=AiohttpTransport()) as client:
        plain = await client.get("/redirect")
        followed = await client.get("/redirect", follow_redirects=True)
    assert plain.status_code == 303
    assert followed.status_code == 200 and followed.json()["method"] == "GET"


async def test_connections_are_kept_and_reused(server: str) -> None:
    transport = AiohttpTransport()
    async with httpx.AsyncClient(base_url=server, transport=transport) as client:
        for _ in range(5):
            assert (await client.get("/echo")).status_code == 200
        connector = transport._pool().connector
        assert connector is not None
        assert sum(len(c) for c in connector._conns.values()) == 1


def test_each_event_loop_gets_its_own_pool() -> None:
    transport = AiohttpTransport()
    loops: list[object] = []

    async def one_call() -> int:
        app = web.Application()
        app.router.add_get("/echo", _echo)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            client = httpx.AsyncClient(transport=transport)
            status = (await client.get(f"http://127.0.0.1:{port}/echo")).status_code
            loops.append(transport._loop)
            if len(loops) == 2:  # a pool of the first loop would fail here, on the second
                await client.aclose()
            return status
        finally:
            await runner.cleanup()

    assert asyncio.run(one_call()) == 200
    first = transport._session
    assert asyncio.run(one_call()) == 200
    assert loops[0] is not loops[1] and transport._session is None
    assert first is not None
    asyncio.run(first.close())  # the pool the first loop left behind
