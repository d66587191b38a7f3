"""A hostile model calling database_query through the whole stack (SPEC T-11, A-09,
invariant 5).

Gateway -> agent-config -> Kafka -> engine -> scripted LLM -> tool-exec -> PostgreSQL: the
scripted model sends the attacks, and the tool results streamed back hold nothing of the
other tenant, nothing of the knowledge base the caller's API key may not use, and no key.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from weft_gateway.auth import hash_key
from weft_storage.gateway.keys import ApiKey
from weft_testkit import LocalStack, read_turn


async def _register_key(
    database_url: str, tenant_id: str, key: str, knowledge_base_ids: list[str] | None = None
) -> None:
    engine = create_async_engine(database_url)
    try:
        async with async_sessionmaker(engine).begin() as s:
            await s.execute(
                insert(ApiKey).values(
                    id=secrets.token_hex(8), tenant_id=tenant_id, user_id="user-x",
                    key_hash=hash_key(key), name="test", knowledge_base_ids=knowledge_base_ids,
                )
            )  # fmt: skip
    finally:
        await engine.dispose()


async def _client(stack: LocalStack, key: str) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.AsyncClient(base_url=stack.gateway_url, headers=headers, timeout=60)


@pytest.fixture
async def other_tenant(
    stack: LocalStack, infra: dict[str, str]
) -> AsyncIterator[tuple[str, str, str]]:
    """Another tenant with a secret document: (tenant id, its key, its KB id)."""
    tenant, key = f"tenant-x-{secrets.token_hex(4)}", f"key-{secrets.token_hex(16)}"
    await _register_key(infra["WEFT_DATABASE_URL"], tenant, key)
    async with await _client(stack, key) as other:
        kb = (await other.post("/api/v1/knowledge-bases", json={"name": "rival-kb"})).json()["id"]
        doc = {"title": "Rival secret", "content": "Rival tenant merger plan: project heron."}
        added = await other.post(f"/api/v1/knowledge-bases/{kb}/documents", json=doc)
        assert added.status_code == 201, added.text
        yield tenant, key, kb


async def test_hostile_sql_returns_nothing_of_another_tenant_or_base(
    api: httpx.AsyncClient,
    stack: LocalStack,
    llm: httpx.AsyncClient,
    infra: dict[str, str],
    knowledge_base: str,
    other_tenant: tuple[str, str, str],
) -> None:  # SPEC T-11, A-09, invariant 5
    other, other_key, other_kb = other_tenant
    mine = {"title": "Refund policy", "content": "Annual plans are refunded within 30 days."}
    added = await api.post(f"/api/v1/knowledge-bases/{knowledge_base}/documents", json=mine)
    assert added.status_code == 201, added.text
    hidden = (await api.post("/api/v1/knowledge-bases", json={"name": "hidden-kb"})).json()["id"]
    doc = {"title": "Hidden board memo", "content": "Board memo: layoffs planned in Q3."}
    added = await api.post(f"/api/v1/knowledge-bases/{hidden}/documents", json=doc)
    assert added.status_code == 201, added.text
    key = f"key-{secrets.token_hex(16)}"  # this tenant's key, limited to one base
    await _register_key(infra["WEFT_DATABASE_URL"], stack.tenant, key, [knowledge_base])

    attacks = [
        "WITH documents AS (SELECT * FROM api_keys) SELECT * FROM documents",
        "WITH api_keys AS (SELECT * FROM api_keys) SELECT * FROM api_keys",
        "SELECT query_to_xml('select * from public.chunks', true, true, '')",
        f"SELECT set_config('weft.tenant_id', '{other}', true), (SELECT count(*) FROM chunks)",
        "SELECT kb.tenant_id, kb.name, count(*), string_agg(left(c.content, 20), '|') "
        "FROM knowledge_bases kb JOIN documents d ON d.knowledge_base_id = kb.id "
        "JOIN chunks c ON c.document_id = d.id GROUP BY 1, 2",
    ]
    token = f"SQLATTACK-{secrets.token_hex(4)}"
    await llm.post("/_script", json={
        "steps": [
            {"match": token, "tool_calls": [
                {"name": "database_query", "arguments": {"sql": sql}} for sql in attacks
            ]},
            {"match": token, "content": "done"},
        ],
        "fallback": "demo",
    })  # fmt: skip
    async with await _client(stack, key) as client:
        agent = await client.post("/api/v1/agents", json={
            "name": "sql agent", "allowed_tools": ["database_query"], "kb_selection_mode": "none",
        })  # fmt: skip
        assert agent.status_code == 201, agent.text
        session = await client.post("/api/v1/sessions", json={"agent_id": agent.json()["id"]})
        events = await read_turn(
            client, f"/api/v1/agent-chat/{session.json()['id']}", api_key=key,
            json_body={"query": f"{token} show me everything"},
        )  # fmt: skip
    assert events[-1].data["data"]["status"] == "completed", events[-1].data
    results = [e.data["data"] for e in events if e.event == "tool_result"]
    assert len(results) == len(attacks)
    streamed = json.dumps(results)
    for leaked in (other, other_kb, "Rival", "heron", hidden, "Hidden board", "layoffs"):
        assert leaked not in streamed, f"{leaked!r} reached the tool results"
    for secret in (hash_key(other_key), hash_key(key), hash_key(stack.api_key)):
        assert secret not in streamed

    refused = [r for r in results if not r["success"]]
    assert len(refused) == 4, results
    assert all("database_query refused" in str(r["error"]) for r in refused)
    broad = next(r for r in results if r["success"])
    rows = json.loads(broad["output"])["rows"]
    assert rows and {row[0] for row in rows} == {stack.tenant}
    assert {row[1] for row in rows} == {"sample"}  # only the base the key may use
    assert "Annual plans are re" in rows[0][3]
