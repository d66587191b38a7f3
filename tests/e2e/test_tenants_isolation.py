"""Tenant isolation (ARCHITECTURE invariant 5) and KB-restricted API keys (SPEC A-09).

Tenant B tries to read, change and stream every resource of tenant A through the public
API and gets 404 (or 403) every time; B's lists never show A's rows.
"""

from __future__ import annotations

import secrets

import httpx
import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from weft_gateway.auth import ApiKeyAuth
from weft_testkit import LocalStack, read_turn

from tests.stack_fixtures import ApiKeys

AGENT = "builtin-smart-reasoning"


async def register_key(
    database_url: str,
    tenant_id: str,
    key: str,
    knowledge_base_ids: list[str] | None = None,
    user_id: str = "user-b",
) -> None:
    """Store an API key the way the gateway does (SHA-256 only) in the real PostgreSQL
    (other suites import it; within a test the ``api_keys`` fixture is shorter)."""
    engine = create_async_engine(database_url)
    try:
        auth = ApiKeyAuth(async_sessionmaker(engine))
        await auth.register(tenant_id, user_id, key, "test", knowledge_base_ids)
    finally:
        await engine.dispose()


@pytest.fixture
async def other_tenant(api_keys: ApiKeys) -> httpx.AsyncClient:
    """A client of a second tenant on the same stack."""
    return (await api_keys.client(tenant=f"tenant-b-{secrets.token_hex(4)}", user="user-b")).http


async def test_other_tenant_sees_nothing_of_ours(
    api: httpx.AsyncClient,
    other_tenant: httpx.AsyncClient,
    stack: LocalStack,
    knowledge_base: str,
) -> None:
    agent = await api.post("/api/v1/agents", json={"name": "private", "agent_type": "rag-qa"})
    assert agent.status_code == 201, agent.text
    agent_id = agent.json()["id"]
    session = await api.post("/api/v1/sessions", json={"agent_id": AGENT})
    session_id = session.json()["id"]
    events = await read_turn(
        api,
        f"/api/v1/agent-chat/{session_id}",
        api_key=stack.api_key,
        json_body={"query": "refund annual plan?", "knowledge_base_ids": [knowledge_base]},
    )
    assert events[-1].event == "complete"

    b = other_tenant
    attempts = [
        ("GET", f"/api/v1/agents/{agent_id}", None),
        ("PUT", f"/api/v1/agents/{agent_id}", {"name": "stolen"}),
        ("DELETE", f"/api/v1/agents/{agent_id}", None),
        ("POST", f"/api/v1/agents/{agent_id}/copy", None),
        ("GET", f"/api/v1/sessions/{session_id}", None),
        ("PATCH", f"/api/v1/sessions/{session_id}", {"title": "x"}),
        ("GET", f"/api/v1/sessions/{session_id}/messages", None),
        ("DELETE", f"/api/v1/sessions/{session_id}/messages", None),
        ("GET", f"/api/v1/sessions/{session_id}/stream", None),
        ("POST", f"/api/v1/sessions/{session_id}/stop", None),
        ("POST", f"/api/v1/sessions/{session_id}/steer", {"content": "hi"}),
        ("POST", f"/api/v1/agent-chat/{session_id}", {"query": "q", "agent_id": AGENT}),
        ("POST", f"/api/v1/knowledge-chat/{session_id}", {"query": "q"}),
        ("DELETE", f"/api/v1/sessions/{session_id}", None),
        (
            "POST",
            f"/api/v1/knowledge-bases/{knowledge_base}/documents",
            {"title": "t", "content": "c"},
        ),
    ]
    for method, url, body in attempts:
        resp = await b.request(method, url, json=body)
        assert resp.status_code in (403, 404), (method, url, resp.status_code, resp.text)

    own = (await b.post("/api/v1/sessions", json={"agent_id": AGENT})).json()["id"]
    for chat in (
        {"query": "q", "agent_id": agent_id},
        {"query": "q", "knowledge_base_ids": [knowledge_base]},
    ):
        resp = await b.post(f"/api/v1/agent-chat/{own}", json=chat)
        assert resp.status_code == 404, (body, resp.text)

    assert agent_id not in {a["id"] for a in (await b.get("/api/v1/agents")).json()}
    assert session_id not in {s["id"] for s in (await b.get("/api/v1/sessions")).json()}
    kbs = (await b.get("/api/v1/knowledge-bases")).json()
    assert knowledge_base not in {k["id"] for k in kbs}

    # ... and everything of A is still there for A.
    assert (await api.get(f"/api/v1/agents/{agent_id}")).status_code == 200
    assert (await api.get(f"/api/v1/sessions/{session_id}/messages")).status_code == 200


async def test_a_session_cannot_be_bound_to_another_tenants_or_an_unknown_agent(
    api: httpx.AsyncClient, other_tenant: httpx.AsyncClient
) -> None:
    """Invariant 5, SPEC A-09: creating or re-pointing a session at an agent the tenant
    cannot use is a 404 naming the agent, checked with agent-config at once (not a 201
    whose first chat then fails); the caller's own and built-in agents still bind."""
    ours = await api.post("/api/v1/agents", json={"name": "private", "kb_selection_mode": "none"})
    assert ours.status_code == 201, ours.text
    agent_id = ours.json()["id"]
    b = other_tenant
    for bad in (agent_id, "agent-that-does-not-exist", "tools", "shared"):
        resp = await b.post("/api/v1/sessions", json={"agent_id": bad})
        assert resp.status_code == 404, (bad, resp.text)
        assert f"agent {bad!r} not found" == resp.json()["detail"]
    own = await b.post("/api/v1/sessions", json={"agent_id": AGENT})
    assert own.status_code == 201, own.text
    session_id = own.json()["id"]
    resp = await b.patch(f"/api/v1/sessions/{session_id}", json={"agent_id": agent_id})
    assert resp.status_code == 404 and agent_id in resp.json()["detail"], resp.text
    assert (await b.get(f"/api/v1/sessions/{session_id}")).json()["agent_id"] == AGENT
    mine = await b.post("/api/v1/agents", json={"name": "b's", "kb_selection_mode": "none"})
    resp = await b.patch(f"/api/v1/sessions/{session_id}", json={"agent_id": mine.json()["id"]})
    assert resp.status_code == 200 and resp.json()["agent_id"] == mine.json()["id"], resp.text
    titled = await b.patch(f"/api/v1/sessions/{session_id}", json={"title": "still fine"})
    assert titled.status_code == 200, titled.text


async def test_kb_restricted_key(
    api: httpx.AsyncClient, api_keys: ApiKeys, knowledge_base: str
) -> None:
    """SPEC A-09: an agent whose scope is all KBs -> 403 with a restricted key; a
    selected scope is checked base by base (403); a KB of the request outside the key is
    the 404 of a missing one, as on the knowledge routes (tests/security/test_scopes.py)."""
    other_kb = (await api.post("/api/v1/knowledge-bases", json={"name": "other"})).json()["id"]
    restricted = await api_keys.client(user="user-b", knowledge_base_ids=[knowledge_base])
    c, key = restricted.http, restricted.key
    session_id = (await c.post("/api/v1/sessions", json={"agent_id": AGENT})).json()["id"]
    url = f"/api/v1/agent-chat/{session_id}"
    scope_all = await c.post(url, json={"query": "q"})
    assert scope_all.status_code == 403, scope_all.text
    denied = await c.post(url, json={"query": "q", "knowledge_base_ids": [other_kb]})
    assert denied.status_code == 404 and other_kb in denied.json()["detail"]
    definition = {"name": "sel", "kb_selection_mode": "selected", "knowledge_base_ids": [other_kb]}
    refused = await c.post("/api/v1/agents", json=definition)
    assert refused.status_code == 404 and other_kb in refused.json()["detail"]
    selected = await api.post("/api/v1/agents", json=definition)  # the unrestricted key's
    assert selected.status_code == 201, selected.text
    by_agent = await c.post(url, json={"query": "q", "agent_id": selected.json()["id"]})
    assert by_agent.status_code == 403
    events = await read_turn(
        c,
        url,
        api_key=key,
        json_body={"query": "refund annual plan?", "knowledge_base_ids": [knowledge_base]},
    )
    assert events[-1].event == "complete"
