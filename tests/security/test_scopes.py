"""Scopes inside one tenant, through the public API on the real stack.

* KB-restricted API keys (SPEC A-09): two keys of one tenant limited to KB A try every
  knowledge route on KB B and its documents; each answers the 404 of a missing knowledge
  base or document (creating a KB is 403), and the unrestricted key sees that nothing was
  written.
* Sessions belong to their user: user 2 of the tenant tries every route by session id on
  user 1's session and gets 404; user 1's messages never reach user 2, not even through
  the search_conversations tool (SPEC T-17), and user 1's session is intact afterwards.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any

import httpx
from weft_testkit import read_turn

from tests.stack_fixtures import ApiKeys, KeyedClient

AGENT = "builtin-smart-reasoning"
KB = "/api/v1/knowledge-bases"


async def _kb_with_document(api: httpx.AsyncClient, name: str) -> tuple[str, str]:
    kb = await api.post(KB, json={"name": name})
    assert kb.status_code == 201, kb.text
    kb_id = kb.json()["id"]
    body = {"title": f"{name} notes", "content": f"{name} holds the word PERIWINKLE."}
    doc = await api.post(f"{KB}/{kb_id}/documents", json=body)
    assert doc.status_code == 201, doc.text
    return kb_id, doc.json()["id"]


async def _tenant_kbs(api: httpx.AsyncClient) -> dict[str, int]:
    """Every KB of the tenant with its document count, as the unrestricted key sees it."""
    counts = {}
    for kb in (await api.get(KB)).json():
        listed = await api.get(f"{KB}/{kb['id']}/documents")
        assert listed.status_code == 200, listed.text
        counts[kb["id"]] = listed.json()["total"]
    return counts


# SPEC A-09
async def test_kb_restricted_keys_reach_only_their_knowledge_bases(
    api: httpx.AsyncClient, api_keys: ApiKeys
) -> None:
    kb_a, doc_a = await _kb_with_document(api, "scope-a")
    kb_b, doc_b = await _kb_with_document(api, "scope-b")
    restricted = [
        await api_keys.client(user=f"scoped-{n}", knowledge_base_ids=[kb_a]) for n in (1, 2)
    ]
    agent = await api.post("/api/v1/agents", json={"name": "scope-a agent"})
    assert agent.status_code == 201, agent.text
    agent_id = agent.json()["id"]
    before = await _tenant_kbs(api)
    missing_kb, missing_doc = f"kb_{secrets.token_hex(8)}", f"doc_{secrets.token_hex(8)}"
    files = {"file": ("notes.md", b"# stolen\nPERIWINKLE", "text/markdown")}
    new_doc = {"title": "stolen", "content": "PERIWINKLE"}
    for key in restricted:
        c = key.http
        listed = await c.get(KB)
        assert listed.status_code == 200 and [k["id"] for k in listed.json()] == [kb_a]
        for kb_id, not_found in ((kb_b, kb_b), (missing_kb, missing_kb)):
            # Out of scope and missing answer alike: the key cannot tell that B exists.
            attempts: list[tuple[str, str, dict[str, Any]]] = [
                ("POST", f"{KB}/{kb_id}/documents", {"json": new_doc}),
                ("POST", f"{KB}/{kb_id}/files", {"files": files}),
                ("GET", f"{KB}/{kb_id}/documents", {}),
                ("GET", f"{KB}/{kb_id}/documents/{doc_b}", {}),
            ]
            for method, url, kwargs in attempts:
                resp = await c.request(method, url, **kwargs)
                assert resp.status_code == 404, (method, url, resp.text)
                assert resp.json()["detail"] == f"knowledge base {not_found!r} not found"
        for doc_id in (doc_b, missing_doc):  # a reachable KB in the path, the document not
            resp = await c.get(f"{KB}/{kb_a}/documents/{doc_id}")
            assert resp.status_code == 404 and resp.json()["detail"] == (
                f"document {doc_id!r} not found"
            )
        created = await c.post(KB, json={"name": "escape hatch"})
        assert created.status_code == 403 and "cannot create" in created.json()["detail"]
        other_kb = {"name": "b", "kb_selection_mode": "selected", "knowledge_base_ids": [kb_b]}
        for method, url in (("POST", "/api/v1/agents"), ("PUT", f"/api/v1/agents/{agent_id}")):
            resp = await c.request(method, url, json=other_kb)
            assert resp.status_code == 404, (method, url, resp.text)
            assert resp.json()["detail"] == f"knowledge base {kb_b!r} not found"
        session = (await c.post("/api/v1/sessions", json={"agent_id": AGENT})).json()["id"]
        chat = await c.post(
            f"/api/v1/agent-chat/{session}", json={"query": "q", "knowledge_base_ids": [kb_b]}
        )
        assert chat.status_code == 404, chat.text
        # ... while KB A works for the key.
        own = await c.get(f"{KB}/{kb_a}/documents/{doc_a}")
        assert own.status_code == 200 and own.json()["knowledge_base_id"] == kb_a
    assert await _tenant_kbs(api) == before  # no KB created, no document added to B or A
    assert (await api.get(f"/api/v1/agents/{agent_id}")).json()["name"] == "scope-a agent"
    assert (await api.get(f"{KB}/{kb_b}/documents/{doc_b}")).status_code == 200


# SPEC A-09
async def test_an_empty_kb_list_never_widens_a_restricted_key_to_every_kb(
    api: httpx.AsyncClient, api_keys: ApiKeys, llm: httpx.AsyncClient
) -> None:
    """Downstream an empty KB scope means every KB of the tenant: a restricted key's
    explicit ``knowledge_base_ids: []`` (or a selected agent with no KB) is refused with
    403, never resolved to []. The demo model searches the knowledge base for the query."""
    kb_a, _ = await _kb_with_document(api, "empty-a")
    await _kb_with_document(api, "empty-b")
    key = await api_keys.client(user="scoped-empty", knowledge_base_ids=[kb_a])
    session = (await key.http.post("/api/v1/sessions", json={"agent_id": AGENT})).json()["id"]
    url = f"/api/v1/agent-chat/{session}"
    empty = await key.http.post(url, json={"query": "PERIWINKLE?", "knowledge_base_ids": []})
    assert empty.status_code == 403, empty.text
    assert "knowledge base" in empty.json()["detail"]
    # The same turn on KB A is served, and finds only KB A's document.
    events = await read_turn(
        key.http, url, api_key=key.key,
        json_body={"query": "which notes hold PERIWINKLE?", "knowledge_base_ids": [kb_a]},
    )  # fmt: skip
    results = [e.data["data"]["output"] for e in events if e.event == "tool_result"]
    assert results and "empty-a notes" in results[0] and "empty-b" not in results[0], results


async def _turn(client: KeyedClient, session_id: str, query: str) -> list[Any]:
    events = await read_turn(
        client.http, f"/api/v1/agent-chat/{session_id}", api_key=client.key,
        json_body={"query": query},
    )  # fmt: skip
    assert events[-1].event == "complete", events
    return events


async def _stored_turn(http: httpx.AsyncClient, session_id: str) -> list[dict[str, Any]]:
    """The session's messages once memory has stored the turn's completed answer."""
    async with asyncio.timeout(30):
        while True:
            resp = await http.get(f"/api/v1/sessions/{session_id}/messages")
            messages: list[dict[str, Any]] = resp.json()
            answered = [m["is_completed"] for m in messages if m["role"] == "assistant"]
            if len(messages) == 2 and answered == [True]:
                return messages
            await asyncio.sleep(0.1)


async def test_another_user_of_the_tenant_gets_404_on_every_session_route(
    api_keys: ApiKeys, llm: httpx.AsyncClient
) -> None:
    """Every route by session id, user 2 on user 1's session: 404, as lists hide it."""
    agent_body = {"name": "recall", "allowed_tools": ["search_conversations"],
                  "kb_selection_mode": "none", "memory_enabled": False}  # fmt: skip
    steps: list[dict[str, Any]] = [
        {"match": "MARIGOLD", "content": "Noted, MARIGOLD."},
        {"match": "PEONY", "content": "Noted, PEONY."},
        {"match": "RECALL", "tool_calls": [
            {"name": "search_conversations", "arguments": {"query": "MARIGOLD launch code"}},
        ]},
        {"match": "RECALL", "content": "Nothing found."},
    ]  # fmt: skip
    assert (await llm.post("/_script", json={"steps": steps})).status_code == 200
    u1 = await api_keys.client(user=f"user-1-{secrets.token_hex(3)}")
    u2 = await api_keys.client(user=f"user-2-{secrets.token_hex(3)}")
    agent = await u1.http.post("/api/v1/agents", json=agent_body)
    assert agent.status_code == 201, agent.text
    agent_id = agent.json()["id"]
    created = await u1.http.post("/api/v1/sessions", json={"agent_id": agent_id, "title": "u1"})
    session_id = created.json()["id"]
    await _turn(u1, session_id, "The MARIGOLD launch code is 4417.")
    messages = await _stored_turn(u1.http, session_id)
    message_id = messages[0]["id"]

    base = f"/api/v1/sessions/{session_id}"
    attempts: list[tuple[str, str, dict[str, Any] | None]] = [
        ("GET", base, None),
        ("PATCH", base, {"title": "mine now"}),
        ("GET", f"{base}/messages", None),
        ("GET", f"{base}/messages?before={message_id}", None),
        ("DELETE", f"{base}/messages/{message_id}", None),
        ("DELETE", f"{base}/messages?from={message_id}", None),
        ("DELETE", f"{base}/messages", None),
        ("GET", f"{base}/stream", None),
        ("POST", f"{base}/stop", None),
        ("POST", f"{base}/steer", {"content": "do something else"}),
        ("POST", f"/api/v1/agent-chat/{session_id}", {"query": "MARIGOLD?", "agent_id": AGENT}),
        ("POST", f"/api/v1/knowledge-chat/{session_id}", {"query": "MARIGOLD?"}),
        ("DELETE", base, None),
    ]
    for method, url, body in attempts:
        resp = await u2.http.request(method, url, json=body)
        assert resp.status_code == 404, (method, url, resp.status_code, resp.text)
        assert "MARIGOLD" not in resp.text
    assert session_id not in {s["id"] for s in (await u2.http.get("/api/v1/sessions")).json()}

    # search_conversations in user 2's own turn finds nothing of user 1 (SPEC T-17).
    # User 2's own earlier turn is stored first, so the search has something of theirs to
    # find (the running turn's own message may not be stored yet when the tool runs).
    theirs = (await u2.http.post("/api/v1/sessions", json={"agent_id": agent_id})).json()["id"]
    await _turn(u2, theirs, "The PEONY launch code is 9001.")
    await _stored_turn(u2.http, theirs)
    events = await _turn(u2, theirs, "RECALL the launch code")
    results = [e.data["data"] for e in events if e.event == "tool_result"]
    assert [r["tool_name"] for r in results] == ["search_conversations"], results
    assert results[0]["success"], results
    found = json.loads(results[0]["output"])["results"]
    assert found, "the search must have run over user 2's own conversation at least"
    assert {hit["session_id"] for hit in found} == {theirs}, found
    assert not [hit for hit in found if "MARIGOLD" in hit["snippet"]], found

    # User 1's session is intact: same title, same messages, its stream still served.
    mine = await u1.http.get(base)
    assert mine.status_code == 200 and mine.json()["title"] == "u1"
    kept = (await u1.http.get(f"{base}/messages")).json()
    assert [(m["id"], m["content"]) for m in kept] == [(m["id"], m["content"]) for m in messages]
    replay = await read_turn(u1.http, f"{base}/stream", api_key=u1.key, method="GET")
    assert replay[-1].event == "complete"
