"""MCP call overhead (SPEC T-19): a tool call through Weft's client path (the pinned
client factory, the per-turn session pool, catalog resolution, argument validation and
result mapping) against a direct SDK call on one open session to the same server.

Both sides reuse their session across calls (Weft's pool does across a turn's calls), so
the difference is Weft's own work per call. The catalog comes from a fake of agent-config's
route served over a loopback socket, so each call's HTTP hop to agent-config is counted, but
not agent-config's own PostgreSQL read. The MCP server and the fake run in threads of the
bench's process (both paths share that cost).

    .venv/bin/python bench/mcp_overhead.py [--calls 300] [--turns 60]

Two series: calls of one turn after its first (the session and the turn's catalog are
kept), and a turn's first call (catalog and connection read, a new session opened and
initialised) against a direct call on a new session.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from ipaddress import ip_network
from typing import Any

import httpx
from benchlib import machine, save, summary
from fastapi import FastAPI
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from weft_contracts import ToolContext
from weft_contracts.mcp import McpCatalog, McpConnection, McpServerCatalog
from weft_mcp_client.safe_http import AddressPolicy, tls_context
from weft_mcp_client.session import list_server_tools, tool_def
from weft_mcp_client.transport import pinned_client_factory
from weft_testkit import mcp_servers as kit
from weft_tool_catalog.registry import ToolInvocation, ToolRegistry
from weft_tools.mcp_calls import McpCaller
from weft_tools.mcp_directory import HttpMcpDirectory
from weft_tools.mcp_pool import McpSessionPool
from weft_tools.mcp_tools import mcp_tools


async def weft_path(url: str, calls: int, turns: int) -> tuple[list[float], list[float]]:
    factory = pinned_client_factory(AddressPolicy(allowed_networks=(ip_network("127.0.0.0/8"),)))
    conn = McpConnection(server_id="b1", server_name="bench", url=url, transport="streamable_http")
    listed = await list_server_tools(conn, factory=factory, timeout_s=10, max_tools=50)
    tools = [tool_def("b1", "bench", t, read_only=True, always_ask=False) for t in listed.tools]
    catalog = McpCatalog(servers=[McpServerCatalog(id="b1", name="bench", tools=tools)])
    app = FastAPI()
    app.get("/internal/mcp/catalog")(lambda: catalog.model_dump(mode="json"))
    app.get("/internal/mcp/servers/{sid}/connection")(lambda sid: conn.model_dump(mode="json"))
    # Over a real loopback socket: each call's catalog read is an HTTP round trip, as it is
    # to agent-config (whose PostgreSQL read is not counted here).
    agent_config = kit.serve(app, path="", transport="streamable_http")
    directory = HttpMcpDirectory(agent_config.base_url)
    caller = McpCaller(directory, McpSessionPool(factory))
    registry = ToolRegistry()
    _, _, dynamic = mcp_tools(caller)
    registry.add_dynamic(dynamic)
    echo = next(t.name for t in tools if t.tool_name == "echo")
    context = ToolContext(user_id="u", agent_id="a", mcp_server_ids=["b1"])
    call = ToolInvocation(tenant_id="t", session_id="s", request_id="r", arguments={"text": "hi"},
                          context=context)  # fmt: skip
    samples: list[float] = []
    for i in range(calls + 10):
        started = time.perf_counter()
        outcome = await registry.execute(echo, call)
        if i >= 10:  # warm-up: the first call opens the session
            samples.append((time.perf_counter() - started) * 1000)
        assert outcome.success, outcome.error
    firsts: list[float] = []
    for i in range(turns):  # each a new turn: catalog, connection, a new session, the call
        turn = replace(call, request_id=f"turn-{i}")
        started = time.perf_counter()
        outcome = await registry.execute(echo, turn)
        firsts.append((time.perf_counter() - started) * 1000)
        assert outcome.success, outcome.error
        await registry.cleanup("s", turn.request_id)
    await caller.pool.close()
    agent_config.stop()
    return samples, firsts


@asynccontextmanager
async def direct_session(url: str) -> AsyncIterator[ClientSession]:
    """An initialised SDK session with the server, as a client without Weft opens one
    (the process's TLS context, as Weft's pinned client uses)."""
    async with (
        httpx.AsyncClient(verify=tls_context()) as http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def direct_first_calls(url: str, turns: int) -> list[float]:
    """A new session each time: connect, initialise, call (what a turn's first call costs
    without Weft)."""
    samples: list[float] = []
    for _ in range(turns):
        started = time.perf_counter()
        async with direct_session(url) as session:
            result = await session.call_tool("echo", {"text": "hi"})
            # Timed before the session closes, as Weft's (closed at the turn's end).
            samples.append((time.perf_counter() - started) * 1000)
        assert not result.isError
    return samples


async def direct_path(url: str, calls: int) -> list[float]:
    samples: list[float] = []
    async with direct_session(url) as session:
        for i in range(calls + 10):
            started = time.perf_counter()
            result = await session.call_tool("echo", {"text": "hi"})
            if i >= 10:
                samples.append((time.perf_counter() - started) * 1000)
            assert not result.isError
    return samples


async def main(calls: int, turns: int) -> dict[str, Any]:
    server = kit.start(kit.tools_server("bench"), "streamable_http")
    try:
        direct = await direct_path(server.url, calls)
        direct_firsts = await direct_first_calls(server.url, turns)
        weft, weft_firsts = await weft_path(server.url, calls, turns)
    finally:
        server.stop()
    d, w = summary(direct), summary(weft)
    df, wf = summary(direct_firsts), summary(weft_firsts)
    return {
        "machine": machine(),
        "direct_sdk_ms": d,
        "weft_ms": w,
        "overhead_p50_ms": round((w["p50"] or 0) - (d["p50"] or 0), 1),
        "overhead_p99_ms": round((w["p99"] or 0) - (d["p99"] or 0), 1),
        "first_call_of_a_turn": {
            "direct_new_session_ms": df,
            "weft_ms": wf,
            "overhead_p50_ms": round((wf["p50"] or 0) - (df["p50"] or 0), 1),
            "overhead_p99_ms": round((wf["p99"] or 0) - (df["p99"] or 0), 1),
        },
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--turns", type=int, default=60)
    args = parser.parse_args()
    result = asyncio.run(main(args.calls, args.turns))
    save("mcp_overhead", result)
