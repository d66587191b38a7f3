"""Long-term memory on the real PostgreSQL (SPEC M-10, T-17): extraction after a completed
turn through a ChatModel, facts scoped to (tenant, user), search_memory and
search_conversations through the memory routes."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_context.images import content_text
from weft_contracts import ToolContext
from weft_llm import TransientLLMError
from weft_memory.api import session_router
from weft_memory.extraction import MemoryExtractor
from weft_memory.longterm import LongTermMemory, parse_facts
from weft_memory.memory_api import memory_router
from weft_storage.memory.models import Message
from weft_testkit.credentials import trusted
from weft_testkit.function_model import FunctionModel, Reply, answer, queued
from weft_tool_catalog.registry import ToolInvocation
from weft_tools.memory_tools import MemoryServiceClient, memory_tools

from tests.workspaces_kit import sandbox_workspaces


@pytest.fixture
def answers() -> list[Reply]:
    """What the extraction model answers, in order; each test queues its own."""
    return []


@pytest.fixture
def model(answers: list[Reply]) -> FunctionModel:
    return queued(answers)


@pytest.fixture
async def app(sessions: async_sessionmaker[AsyncSession], model: FunctionModel) -> FastAPI:
    memory = LongTermMemory(sessions)
    extractor = MemoryExtractor(sessions, model, "m", memory)
    app = FastAPI()
    app.include_router(session_router(sessions, sandbox_workspaces(sessions)))
    app.include_router(memory_router(sessions, memory, extractor))
    return app


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = trusted(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://memory") as c:
        yield c


async def _turn(
    client: httpx.AsyncClient,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    user: str,
    question: str,
    answer: str,
    completed: bool = True,
) -> tuple[str, str]:
    resp = await client.post(
        "/internal/sessions", json={"tenant_id": tenant, "user_id": user, "title": "chat"}
    )
    sid, rid = resp.json()["id"], f"req_{secrets.token_hex(6)}"
    at = datetime.now(UTC)
    async with sessions.begin() as s:
        for role, text, delta in (("user", question, 0), ("assistant", answer, 1)):
            s.add(Message(
                id=f"m{secrets.token_hex(8)}", tenant_id=tenant, session_id=sid, request_id=rid,
                role=role, content=text, is_completed=completed or role == "user",
                created_at=at + timedelta(microseconds=delta),
            ))  # fmt: skip
    return sid, rid


async def test_extraction_writes_scoped_facts_and_search_recalls_them(
    client: httpx.AsyncClient,
    sessions: async_sessionmaker[AsyncSession],
    model: FunctionModel,
    answers: list[Reply],
) -> None:
    tenant, other = f"t-{secrets.token_hex(4)}", f"t-{secrets.token_hex(4)}"
    sid, rid = await _turn(
        client, sessions, tenant, "alice", "I only write Python, and I work on Project Falcon.",
        "Noted: Python for Project Falcon.",
    )  # fmt: skip
    answers.append(answer('["The user writes Python only.", "The user works on Project Falcon."]'))
    body = {"tenant_id": tenant, "user_id": "alice", "session_id": sid, "request_id": rid}
    resp = await client.post("/internal/memories/extract", json=body)
    assert resp.status_code == 200 and len(resp.json()["memory_ids"]) == 2
    assert "Project Falcon" in content_text(model.requests[0].messages[1]["content"])
    # Re-running the extraction on the same turn stores nothing twice.
    answers.append(answer('["The user works on Project Falcon."]'))
    again = await client.post("/internal/memories/extract", json=body)
    assert again.json()["memory_ids"][0] in resp.json()["memory_ids"]

    search = "/internal/memories/search"
    hits = (await client.get(search, params={
        "tenant_id": tenant, "user_id": "alice", "query": "which project is it?"
    })).json()["memories"]  # fmt: skip
    assert [h["content"] for h in hits] == ["The user works on Project Falcon."]
    assert hits[0]["score"] > 0
    everything = await client.get(search, params={"tenant_id": tenant, "user_id": "alice"})
    assert len(everything.json()["memories"]) == 2
    for scope in (
        {"tenant_id": tenant, "user_id": "bob"},
        {"tenant_id": other, "user_id": "alice"},
    ):
        assert (await client.get(search, params={**scope, "query": "Falcon"})).json() == {
            "memories": []
        }  # SPEC M-10: isolated per space and caller
    forget = await client.delete(
        f"/internal/memories/{hits[0]['id']}", params={"tenant_id": tenant, "user_id": "bob"}
    )
    assert forget.status_code == 404


async def test_incomplete_turn_or_model_failure_writes_nothing(
    client: httpx.AsyncClient,
    sessions: async_sessionmaker[AsyncSession],
    answers: list[Reply],
) -> None:
    tenant = f"t-{secrets.token_hex(4)}"
    sid, rid = await _turn(client, sessions, tenant, "u", "I like tea", "ok", completed=False)
    body = {"tenant_id": tenant, "user_id": "u", "session_id": sid, "request_id": rid}
    assert (await client.post("/internal/memories/extract", json=body)).status_code == 404
    sid, rid = await _turn(client, sessions, tenant, "u", "I like tea", "ok")
    answers.append(TransientLLMError("down"))
    body = {"tenant_id": tenant, "user_id": "u", "session_id": sid, "request_id": rid}
    resp = await client.post("/internal/memories/extract", json=body)
    assert resp.status_code == 502 and "down" in resp.json()["detail"]  # reported, not a 500
    foreign = await client.post("/internal/memories/extract", json={**body, "tenant_id": "x"})
    assert foreign.status_code == 404


async def test_memory_tools_search_in_the_callers_scope(
    app: FastAPI, client: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    # SPEC T-17: search_memory and search_conversations, scope implicit.
    tenant = f"t-{secrets.token_hex(4)}"
    await LongTermMemory(sessions).remember(
        tenant, "alice", ["The user's favourite database is PostgreSQL."], session_id="s",
        request_id="r",
    )  # fmt: skip
    await _turn(client, sessions, tenant, "alice", "How do I tune autovacuum?", "Use cost limits.")
    await _turn(client, sessions, tenant, "bob", "autovacuum secrets of bob", "no")
    client_ = MemoryServiceClient("http://memory", transport=trusted(app))
    search_memory, search_conversations = memory_tools(client_)

    def call(query: str, limit: int | None = None) -> ToolInvocation:
        args: dict[str, object] = {"query": query} | ({"limit": limit} if limit else {})
        return ToolInvocation(
            tenant_id=tenant, session_id="s", request_id="r", arguments=args,
            context=ToolContext(user_id="alice", agent_id="a"),
        )  # fmt: skip

    found = await search_memory.run(call("favourite database"))
    assert found.success and "PostgreSQL" in found.output
    convs = await search_conversations.run(call("autovacuum", 8))
    assert convs.success and "tune autovacuum" in convs.output and "bob" not in convs.output


def test_parse_facts_accepts_json_or_bullets() -> None:
    assert parse_facts('Sure: ["a", "b"]') == ["a", "b"]
    assert parse_facts("- one\n* two\nnot a fact") == ["one", "two"]
    assert parse_facts("[]") == []
