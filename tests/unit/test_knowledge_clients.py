"""The clients of the knowledge service: tool-exec's (the knowledge tools), the gateway's
(the public knowledge routes), agent-config's (KB guard and titles) and knowledge's own
usage client to memory. Each presents the right credential, names the tenant, and turns
knowledge's answers into what its caller expects (a tool error text, a 404, a 503)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi import HTTPException
from weft_agent_config.knowledge_client import BASES_SCOPE, TITLES_SCOPE, KnowledgeService
from weft_agent_config.knowledge_guard import KnowledgeDirectory, UnknownKnowledgeBase
from weft_contracts import ToolContext
from weft_gateway.knowledge_client import KnowledgeClient as GatewayKnowledge
from weft_knowledge.usage import DocumentUsage
from weft_platform.internal_auth import outbound_credential
from weft_tool_catalog import ToolInvocation
from weft_tool_catalog.capabilities import KBCapability
from weft_tool_catalog.specs import SearchMode
from weft_tools.knowledge_client import KnowledgeClient, KnowledgeUnavailable
from weft_tools.ranking import NoIndexInScope

Handler = Callable[[httpx.Request], httpx.Response]
HIT = {
    "chunk_id": "chk_1", "document_id": "doc_1", "knowledge_base_id": "kb_1", "title": "Refunds",
    "content": "Refunds take 30 days.", "position": 0, "score": 0.5, "rerank_score": None,
}  # fmt: skip


def recording(answer: Handler) -> tuple[list[httpx.Request], httpx.MockTransport]:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answer(request)

    return seen, httpx.MockTransport(handle)


def call(tenant: str = "t1", retrieval: str | None = None) -> ToolInvocation:
    context = ToolContext(user_id="u", agent_id="a", retrieval_tenant_id=retrieval)
    return ToolInvocation(
        tenant_id=tenant, session_id="s", request_id="r", arguments={}, context=context,
        credential="turn-token",
    )  # fmt: skip


async def test_tool_search_presents_the_turn_credential_and_reads_the_report() -> None:
    report = {"results": [HIT], "requested_mode": "hybrid", "mode_fallbacks": [],
              "rerank_rejected": False}  # fmt: skip
    seen, transport = recording(lambda _: httpx.Response(200, json=report))
    client = KnowledgeClient("http://knowledge", transport=transport)
    found = await client.search(
        "t1", ["kb_1"], "refund", SearchMode.HYBRID, 5, credential="turn-token"
    )
    assert [c.chunk_id for c in found.results] == ["chk_1"]
    assert found.requested_mode is SearchMode.HYBRID
    (sent,) = seen
    assert sent.headers["authorization"] == "Bearer turn-token"
    body = json.loads(sent.content)
    assert (body["tenant_id"], body["knowledge_base_ids"], body["mode"]) == (
        "t1", ["kb_1"], "hybrid",
    )  # fmt: skip
    await client.aclose()


async def test_tool_client_errors_are_texts_the_model_can_read() -> None:
    _, empty = recording(lambda _: httpx.Response(409, json={"detail": "no knowledge base"}))
    with pytest.raises(NoIndexInScope, match="no knowledge base"):
        await KnowledgeClient("http://k", transport=empty).search(
            "t1", [], "q", SearchMode.KEYWORD, 5, credential=None
        )

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(KnowledgeUnavailable, match=r"unavailable \(ConnectError\); try again"):
        await KnowledgeClient("http://k", transport=httpx.MockTransport(down)).document(
            "t1", [], "doc_1", credential=None
        )
    _, missing = recording(lambda _: httpx.Response(404, json={"detail": "not found"}))
    assert (
        await KnowledgeClient("http://k", transport=missing).document(
            "t1", ["kb_1"], "doc_1", credential=None
        )
        is None
    )


def test_only_a_shared_agents_knowledge_call_presents_tool_execs_own_credential() -> None:
    client = KnowledgeClient("http://k", own_credential=lambda: "tool-exec-token")
    assert client.credential_for(call()) == "turn-token"
    # A shared agent's knowledge tool runs in its owner's tenant (invocation_tenant).
    assert client.credential_for(call("owner", retrieval="owner")) == "tool-exec-token"
    # Any other tool of that turn stays in the caller's tenant, with the turn's credential.
    assert client.credential_for(call("caller", retrieval="owner")) == "turn-token"
    assert KnowledgeClient("http://k").credential_for(call("o", retrieval="o")) == "turn-token"


async def test_gateway_client_forwards_the_api_credential_and_maps_answers() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/kb_missing"):
            return httpx.Response(404, json={"detail": "knowledge base 'kb_missing' not found"})
        if request.url.path.endswith("/kb_broken"):
            return httpx.Response(500, text="boom")
        return httpx.Response(200, json={"id": "kb_1"})

    seen, transport = recording(answer)
    client = GatewayKnowledge("http://knowledge", "knowledge", transport=transport)
    token = outbound_credential.set("api-token")
    try:
        assert await client.knowledge_base_exists("t1", "kb_1") is True
        assert await client.knowledge_base_exists("t1", "kb_missing") is False
        with pytest.raises(HTTPException) as failed:
            await client.knowledge_base_exists("t1", "kb_broken")
    finally:
        outbound_credential.reset(token)
    assert failed.value.status_code == 503
    assert all(r.headers["authorization"] == "Bearer api-token" for r in seen)
    assert {r.url.params["tenant_id"] for r in seen} == {"t1"}
    await client.aclose()


async def test_agent_config_asks_with_its_own_scoped_credential() -> None:
    scopes: list[list[str]] = []

    def credential(wanted: list[str]) -> str:
        scopes.append(wanted)
        return "agent-config-token"

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/internal/document-titles":
            title = {"title": "Refunds", "document_id": "doc_1", "knowledge_base_id": "kb_1"}
            return httpx.Response(200, json=[title])
        body: dict[str, Any] = json.loads(request.content)
        if "kb_gone" in body["knowledge_base_ids"]:
            return httpx.Response(404, json={"detail": "knowledge bases not found: ['kb_gone']"})
        kb = {"id": "kb_1", "name": "Docs", "description": "", "capabilities": ["keyword",
              "vector", "hologram"]}  # fmt: skip
        return httpx.Response(200, json=[kb])

    seen, transport = recording(answer)
    service = KnowledgeService("http://knowledge", credential, transport=transport)
    directory = KnowledgeDirectory(service)
    (kb,) = await directory.scoped("t1", ["kb_1"])
    assert kb.info.id == "kb_1"
    assert kb.capabilities == frozenset({KBCapability.KEYWORD, KBCapability.VECTOR})
    with pytest.raises(UnknownKnowledgeBase, match="kb_gone"):
        await directory.scoped("t1", ["kb_gone"])
    titles = await service.titles("t1", ["kb_1"], 8)
    assert titles[0]["title"] == "Refunds"
    assert scopes == [[BASES_SCOPE], [BASES_SCOPE], [TITLES_SCOPE]]
    assert all(r.headers["authorization"] == "Bearer agent-config-token" for r in seen)

    _, broken = recording(lambda _: httpx.Response(401, json={"detail": "no"}))
    with pytest.raises(HTTPException) as failed:
        await KnowledgeService("http://k", credential, transport=broken).titles("t1", [], 8)
    assert failed.value.status_code == 503, "a refusal of agent-config's own call is no 4xx"
    await service.aclose()


async def test_usage_is_sent_once_per_document_and_a_failure_is_reported() -> None:
    seen, transport = recording(lambda _: httpx.Response(204))
    usage = DocumentUsage("http://memory", lambda: "knowledge-token", transport=transport)
    assert await usage.record(tenant_id="t1", document_id="doc_1", user_id="u", size_bytes=12)
    (sent,) = seen
    assert (sent.method, sent.url.path) == ("PUT", "/internal/usage/documents/doc_1")
    assert json.loads(sent.content) == {"tenant_id": "t1", "user_id": "u", "size_bytes": 12}
    assert sent.headers["authorization"] == "Bearer knowledge-token"
    _, refused = recording(lambda _: httpx.Response(403))
    failing = DocumentUsage("http://memory", lambda: "x", transport=refused)
    assert not await failing.record(tenant_id="t1", document_id="d", user_id="", size_bytes=1)
    await usage.aclose()
    await failing.aclose()
