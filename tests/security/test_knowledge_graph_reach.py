"""``POST /internal/graph/query`` (SPEC T-10) attacked on knowledge's port as if a
credential had leaked, and ``query_knowledge_graph``'s bounds: another tenant's
credential and the victim's own KB-restricted key learn nothing of the victim's
entities and relations; a credential naming the victim's tenant is 403; hostile bodies
(many KB ids, a huge query, ids of every shape) are 422 or a per-KB error, never a
crash."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from weft_testkit import LocalStack

from tests.security.test_knowledge_service_reach import request_credential

SECRET_NAME = "Zarvox Cipherworks"
GRAPH_JSON = {
    "entities": [{"name": SECRET_NAME, "type": "organisation"}, {"name": "Mira Quell"}],
    "relations": [{"source": "Mira Quell", "relation": "runs", "target": SECRET_NAME}],
}
ROUTE = "/internal/graph/query"


@dataclass(frozen=True)
class GraphVictim:
    """The stack tenant's graph KB (its extraction done) and a sibling graph KB."""

    tenant: str
    graph_kb: str
    sibling_kb: str


@pytest.fixture
async def knowledge(stack: LocalStack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.url("knowledge"), timeout=30) as client:
        yield client


@pytest.fixture
async def victim(api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient) -> GraphVictim:
    await llm.post(
        "/_script", json={"steps": [{"match": "Zarvox", "content": json.dumps(GRAPH_JSON)}]}
    )
    kbs = []
    for name in ("secret graph", "sibling graph"):
        made = await api.post("/api/v1/knowledge-bases", json={"name": name, "graph_enabled": True})
        kbs.append(made.json()["id"])
    text = f"Mira Quell runs {SECRET_NAME}, which sells ciphers."
    added = await api.post(
        f"/api/v1/knowledge-bases/{kbs[0]}/documents", json={"title": "Zarvox", "content": text}
    )
    assert added.status_code == 201, added.text
    for _ in range(200):
        graph = (await api.get(f"/api/v1/knowledge-bases/{kbs[0]}")).json()["graph"]
        if graph["relations"]:
            break
        await asyncio.sleep(0.1)
    assert graph["relations"] == 1, graph
    return GraphVictim(stack.tenant, kbs[0], kbs[1])


def _body(
    tenant: str, kbs: list[str], query: str = f"Who runs {SECRET_NAME}?"
) -> dict[str, object]:
    return {"tenant_id": tenant, "knowledge_base_ids": kbs, "query": query}


async def test_the_owner_reads_its_graph_and_nothing_else_does(
    stack: LocalStack, knowledge: httpx.AsyncClient, victim: GraphVictim
) -> None:
    own = request_credential(stack, victim.tenant)
    resp = await knowledge.post(ROUTE, json=_body(victim.tenant, [victim.graph_kb]), headers=own)
    assert resp.status_code == 200, resp.text
    (answer,) = resp.json()["results"]
    assert answer["relations"][0]["target"] == SECRET_NAME  # the control: it is there

    # The sibling KB of the same tenant holds none of it (KB scope).
    sibling = await knowledge.post(
        ROUTE, json=_body(victim.tenant, [victim.sibling_kb]), headers=own
    )
    assert sibling.status_code == 200 and SECRET_NAME not in sibling.text

    # Another tenant with the victim's KB id: a per-KB "not found", nothing of the graph.
    attacker = f"attacker-{secrets.token_hex(3)}"
    theirs = await knowledge.post(
        ROUTE, json=_body(attacker, [victim.graph_kb]), headers=request_credential(stack, attacker)
    )
    assert theirs.status_code == 200
    assert theirs.json()["results"] == [
        {"knowledge_base_id": victim.graph_kb, "error": "knowledge base not found"}
    ]
    # ... and naming the victim's tenant with its own credential: 403.
    named = await knowledge.post(
        ROUTE, json=_body(victim.tenant, [victim.graph_kb]),
        headers=request_credential(stack, attacker),
    )  # fmt: skip
    assert named.status_code == 403 and SECRET_NAME not in named.text

    # The victim's own key limited to the sibling KB (SPEC A-09).
    limited = request_credential(stack, victim.tenant, kbs=[victim.sibling_kb])
    narrowed = await knowledge.post(
        ROUTE, json=_body(victim.tenant, [victim.graph_kb, victim.sibling_kb]), headers=limited
    )
    assert narrowed.status_code == 200 and SECRET_NAME not in narrowed.text
    assert narrowed.json()["results"][0]["error"] == "knowledge base not found"

    # No credential, or one for another service: refused before any query.
    bare = await knowledge.post(ROUTE, json=_body(victim.tenant, [victim.graph_kb]))
    assert bare.status_code == 401
    wrong = request_credential(stack, victim.tenant, audience=["memory"])
    other = await knowledge.post(ROUTE, json=_body(victim.tenant, [victim.graph_kb]), headers=wrong)
    assert other.status_code in (401, 403) and SECRET_NAME not in other.text


async def test_hostile_bodies_are_refused_or_answered_per_kb(
    stack: LocalStack, knowledge: httpx.AsyncClient, victim: GraphVictim
) -> None:
    own = request_credential(stack, victim.tenant)
    refused = [
        _body(victim.tenant, []),
        _body(victim.tenant, [f"kb_{i}" for i in range(11)]),
        _body(victim.tenant, [victim.graph_kb], query="x" * 2001),
        _body(victim.tenant, [victim.graph_kb], query=""),
        _body(victim.tenant, ["k" * 65]),
        {"tenant_id": victim.tenant, "knowledge_base_ids": victim.graph_kb, "query": "q"},
        {**_body(victim.tenant, [victim.graph_kb]), "depth": 99},
        _body(victim.tenant, [victim.graph_kb], query="\x00 Zarvox"),
    ]
    for body in refused:
        resp = await knowledge.post(ROUTE, json=body, headers=own)
        assert resp.status_code == 422, (body, resp.text)
    answered = [
        ("%' OR 1=1 --", [victim.graph_kb]),
        ("Zarvox \u202e Cipher\u200bworks", [victim.graph_kb]),
        ("zarvox " * 280, [victim.graph_kb, victim.graph_kb]),
        ("Mira", ["../../etc/passwd", "kb_' OR '1'='1"]),
    ]
    for query, kbs in answered:
        resp = await knowledge.post(ROUTE, json=_body(victim.tenant, kbs, query), headers=own)
        assert resp.status_code == 200, (query[:40], resp.text)
        for answer in resp.json()["results"]:
            assert set(answer) >= {"knowledge_base_id"}
    weird = await knowledge.post(
        ROUTE, json=_body(victim.tenant, ["../../etc/passwd"], "Mira"), headers=own
    )
    assert weird.json()["results"][0]["error"] == "knowledge base not found"
