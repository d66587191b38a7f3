"""Connection limits of the gateway through the whole stack (docs/budgets.md): a
tenant's open SSE streams are capped across replicas (2 on the limits stack), and a
connection whose request head is not complete within 2 s is closed (slowloris).

Streams are held open by turns whose model call hangs (the scripted model's
``stall_after_chunks``) until the test resets the model."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httpx
import pytest
from weft_testkit import LocalStack, chat_requests, read_turn

from tests.stack_fixtures import ApiKeys, KeyedClient

pytestmark = pytest.mark.kafka

CAP = 2


async def _session(client: KeyedClient) -> str:
    body = {"name": "streams", "kb_selection_mode": "none", "allowed_tools": []}
    agent = await client.http.post("/api/v1/agents", json=body)
    assert agent.status_code == 201, agent.text
    session = await client.http.post("/api/v1/sessions", json={"agent_id": agent.json()["id"]})
    assert session.status_code == 201, session.text
    return str(session.json()["id"])


@contextlib.asynccontextmanager
async def _open_stream(client: KeyedClient, query: str) -> AsyncIterator[httpx.Response]:
    """A chat stream held open until the block ends (the client then disconnects)."""
    session_id = await _session(client)
    request = client.http.build_request(
        "POST", f"/api/v1/agent-chat/{session_id}", json={"query": query}
    )
    response = await client.http.send(request, stream=True)
    try:
        yield response
    finally:
        await response.aclose()


async def _held_streams(llm: httpx.AsyncClient, count: int) -> None:
    """Wait until ``count`` held turns reached the model (their streams are open)."""
    deadline = time.monotonic() + 60
    while len([r for r in await chat_requests(llm) if "HOLD" in str(r["messages"])]) < count:
        assert time.monotonic() < deadline, "the held turns never reached the model"
        await asyncio.sleep(0.2)


async def test_a_tenant_gets_at_most_its_cap_of_streams(
    limits_stack: LocalStack, limits_keys: ApiKeys, limits_llm: httpx.AsyncClient
) -> None:
    await limits_llm.post("/_script", json={"steps": [
        {"match": "HOLD", "content": "never finished", "stall_after_chunks": 1},
        {"match": "HOLD", "content": "never finished", "stall_after_chunks": 1},
        {"match": "AFTER", "content": "A slot was free."},
        {"match": "OTHER", "content": "Other tenant."},
    ]})  # fmt: skip
    heavy = await limits_keys.client(tenant=f"streams-{secrets.token_hex(3)}")
    other = await limits_keys.client(tenant=f"calm-{secrets.token_hex(3)}")
    async with _open_stream(heavy, "HOLD one") as first:
        assert first.status_code == 200
        async with _open_stream(heavy, "HOLD two") as second:
            assert second.status_code == 200
            await _held_streams(limits_llm, CAP)
            refused = await heavy.http.post(
                f"/api/v1/agent-chat/{await _session(heavy)}", json={"query": "AFTER"}
            )
            assert refused.status_code == 429, refused.text
            detail = refused.json()["detail"]
            assert detail["code"] == "too_many_streams" and detail["limit"] == CAP
            assert int(refused.headers["Retry-After"]) >= 1
            # Refused before the turn was published: the model never saw it.
            assert not [r for r in await chat_requests(limits_llm) if "AFTER" in str(r)]
            other_turn = await read_turn(
                other.http, f"/api/v1/agent-chat/{await _session(other)}",
                api_key=other.key, json_body={"query": "OTHER"},
            )  # fmt: skip
            assert other_turn[-1].data["data"]["status"] == "completed"
        # The second stream closed (its turn still runs): its slot is free again.
        session_id = await _session(heavy)
        deadline = time.monotonic() + 30
        while True:
            try:
                events = await read_turn(
                    heavy.http, f"/api/v1/agent-chat/{session_id}", api_key=heavy.key,
                    json_body={"query": "AFTER", "double_texting": "reject"},
                )  # fmt: skip
                break
            except httpx.HTTPStatusError as exc:
                assert exc.response.status_code == 429
                assert time.monotonic() < deadline, "a closed stream never freed its slot"
                await asyncio.sleep(0.3)
        assert events[-1].data["data"]["status"] == "completed"


async def _closed(reader: asyncio.StreamReader) -> bool:
    """Whether the server closed the connection (without waiting for it)."""
    try:
        data = await asyncio.wait_for(reader.read(1024), 0.05)
    except TimeoutError:
        return False
    return data == b""


async def test_a_slow_request_head_is_closed(limits_stack: LocalStack) -> None:
    """Slowloris: headers sent a byte at a time never complete; the gateway closes the
    socket (without a response) once its header-read timeout passes, while a request
    sent at once on a fresh connection is answered."""
    url = urlsplit(limits_stack.gateway_url)
    assert url.hostname is not None and url.port is not None
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    head = b"GET /healthz HTTP/1.1\r\nHost: weft\r\n" + b"X-Slow: " + b"a" * 10_000
    sent, closed = 0, False
    deadline = time.monotonic() + 60
    try:
        for byte in head:
            writer.write(bytes([byte]))
            await writer.drain()
            sent += 1
            if await _closed(reader):
                closed = True
                break
            assert time.monotonic() < deadline, "the slow connection was never closed"
    except (ConnectionResetError, BrokenPipeError):
        closed = True
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    assert closed and sent < len(head)

    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: weft\r\nConnection: close\r\n\r\n")
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 30)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 200")
