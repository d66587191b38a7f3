"""FAQ bases and mentions in knowledge on the real PostgreSQL (SPEC C-04, A-11): entries
written and read through knowledge's internal routes, imported from CSV, found by
keyword and by their questions' embeddings, first under FAQ priority; documents tagged
and a mention's targets bounding ``search_knowledge``.

The routes run in-process (``httpx.ASGITransport``), the tools reach them as tool-exec
reaches knowledge; the embedder is the scripted LLM test double's own function.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from weft_contracts import ToolContext
from weft_knowledge.api import knowledge_router
from weft_knowledge.search import KnowledgeSearch
from weft_knowledge.titles import KnowledgeDirectory
from weft_knowledge.usage import DocumentUsage
from weft_platform.web_snapshots import MemorySnapshotStore
from weft_scripted_llm.embeddings import embed_text
from weft_storage.knowledge.documents import DocumentReader
from weft_storage.knowledge.faq import FaqStore
from weft_storage.knowledge.graph import GraphStore
from weft_storage.knowledge.ingest import IngestionQueue
from weft_storage.knowledge.store import KnowledgeStore
from weft_tool_catalog import ToolInvocation, ToolRegistry
from weft_tools.aliases import RedisAliasBook
from weft_tools.builtin import ToolDependencies, builtin_registry
from weft_tools.knowledge_client import KnowledgeClient

FAQ_CSV = (
    b"question,answer,similar_questions,tag\n"
    b"How do I reset my password?,Use the reset link on the sign-in page.,"
    b"forgot my password|lost password,account\n"
    b"What are the support hours?,Support answers from 8am to 6pm CET.,,support\n"
)


class ScriptedEmbedder:
    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [embed_text(t, 64) for t in texts]


@pytest.fixture
async def redis(infra: dict[str, str]) -> AsyncIterator[Redis]:
    client = Redis.from_url(infra["WEFT_REDIS_URL"])
    yield client
    await client.aclose()


class Kit:
    def __init__(self, engine: AsyncEngine, redis: Redis):
        sessions = async_sessionmaker(engine, expire_on_commit=False)
        self.store = KnowledgeStore(sessions)
        self.reader = DocumentReader(sessions)
        self.faq = FaqStore(sessions)
        embedder = ScriptedEmbedder()
        search = KnowledgeSearch(self.store, self.reader, embedder=embedder, faq=self.faq)
        api = FastAPI()
        api.include_router(
            knowledge_router(
                self.store, self.reader, IngestionQueue(sessions), search,
                DocumentUsage("http://memory.invalid", lambda: ""),
                KnowledgeDirectory(sessions), GraphStore(sessions), document_wait_s=0,
                faq=self.faq,
                embedder=embedder,
            )
        )  # fmt: skip
        transport = httpx.ASGITransport(api)
        self.http = httpx.AsyncClient(transport=transport, base_url="http://knowledge")
        knowledge = KnowledgeClient("http://knowledge", transport=transport)
        self.registry: ToolRegistry = builtin_registry(
            ToolDependencies(
                knowledge=knowledge, sessions=sessions, snapshots=MemorySnapshotStore(),
                aliases=RedisAliasBook(redis),
            )
        )  # fmt: skip
        self.tenant = f"t-{secrets.token_hex(4)}"

    async def search(self, args: dict[str, Any], **context: Any) -> tuple[dict[str, Any], Any]:
        ctx = ToolContext(user_id="u", agent_id="a", **context)
        call = ToolInvocation(
            tenant_id=self.tenant, session_id=f"s-{secrets.token_hex(3)}", request_id="r",
            arguments=args, context=ctx,
        )  # fmt: skip
        outcome = await self.registry.execute("search_knowledge", call)
        assert outcome.success, outcome.error
        return json.loads(outcome.output), outcome.data


@pytest.fixture
async def kit(engine: AsyncEngine, redis: Redis) -> AsyncIterator[Kit]:
    kit = Kit(engine, redis)
    yield kit
    await kit.http.aclose()


async def _faq_kb(kit: Kit) -> str:
    made = await kit.http.post(
        "/internal/knowledge-bases", json={"tenant_id": kit.tenant, "name": "faq", "kind": "faq"}
    )
    assert made.status_code == 201 and made.json()["kind"] == "faq", made.text
    kb_id: str = made.json()["id"]
    imported = await kit.http.post(
        f"/internal/knowledge-bases/{kb_id}/faq/import",
        params={"tenant_id": kit.tenant, "file_name": "faq.csv"}, content=FAQ_CSV,
    )  # fmt: skip
    assert imported.status_code == 201 and imported.json() == {"imported": 2, "embedded": True}
    return kb_id


async def test_entries_are_written_read_and_deleted_through_their_base(kit: Kit) -> None:
    kb = await _faq_kb(kit)
    mine = {"tenant_id": kit.tenant}
    base = f"/internal/knowledge-bases/{kb}/faq/entries"
    park = {"question": "Where do I park?", "answer": "Level -2.", "similar_questions": ["parking"]}
    created = await kit.http.post(base, json={**mine, **park})
    assert created.status_code == 201, created.text
    entry = created.json()
    assert entry["similar_questions"] == ["parking"] and "tenant_id" not in entry
    listed = (await kit.http.get(base, params={**mine, "size": 10})).json()
    assert listed["total"] == 3 and listed["items"][-1]["id"] == entry["id"]
    moved = {"question": "Parking?", "answer": "Level -3."}
    replaced = await kit.http.put(f"{base}/{entry['id']}", json={**mine, **moved})
    assert replaced.json()["answer"] == "Level -3." and replaced.json()["similar_questions"] == []
    assert (await kit.http.delete(f"{base}/{entry['id']}", params=mine)).status_code == 204
    assert (await kit.http.get(f"{base}/{entry['id']}", params=mine)).status_code == 404
    assert (await kit.http.delete(f"{base}/{entry['id']}", params=mine)).status_code == 404
    blank = await kit.http.post(base, json={**mine, "question": "   ", "answer": "x"})
    assert blank.status_code == 422 and "question" in blank.text


async def test_faq_and_document_bases_refuse_each_others_content(kit: Kit) -> None:
    faq = await _faq_kb(kit)
    docs = await kit.store.create_knowledge_base(kit.tenant, "docs")
    mine = {"tenant_id": kit.tenant}
    text = await kit.http.post(f"/internal/knowledge-bases/{faq}/documents",
                               json={**mine, "title": "t", "content": "c"})  # fmt: skip
    assert text.status_code == 409 and "FAQ base" in text.json()["detail"]
    entry = await kit.http.post(f"/internal/knowledge-bases/{docs}/faq/entries",
                                json={**mine, "question": "q", "answer": "a"})  # fmt: skip
    assert entry.status_code == 409 and "'documents' base" in entry.json()["detail"]
    shown = await kit.http.get(f"/internal/knowledge-bases/{faq}", params=mine)
    view = shown.json()
    assert view["id"] == faq and view["kind"] == "faq", view
    assert "faq" in view["capabilities"], view


@pytest.mark.parametrize("mode", ["keyword", "semantic", "hybrid"])
async def test_entries_are_found_by_keyword_and_by_meaning(kit: Kit, mode: str) -> None:
    kb = await _faq_kb(kit)
    body, data = await kit.search({"query": "I forgot my password", "mode": mode},
                                  knowledge_base_ids=[kb])  # fmt: skip
    top = body["results"][0]
    assert top["type"] == "faq" and "reset link" in top["content"]
    assert "faq_" not in json.dumps(body)  # SPEC E-22: a handle, never the stored id
    [match] = [m for m in data["faq"] if m["alias"] == top["id"]]
    assert match["answer"] == "Use the reset link on the sign-in page."
    assert match["match_score"] == 1.0  # a phrasing of the entry is the query's words


async def test_faq_priority_puts_entries_before_passages(kit: Kit) -> None:
    faq = await _faq_kb(kit)
    docs = await kit.store.create_knowledge_base(kit.tenant, "docs")
    await kit.store.add_document(kit.tenant, docs, "hours", "Support hours are 8am to 6pm.")
    scope = {"knowledge_base_ids": [faq, docs]}
    body, _ = await kit.search({"query": "support hours", "mode": "keyword"}, **scope)
    kinds = [r.get("type", "chunk") for r in body["results"]]
    assert sorted(kinds) == ["chunk", "faq"]
    body, _ = await kit.search(
        {"query": "support hours", "mode": "keyword"}, faq_score_boost=0.1, **scope
    )
    assert [r.get("type", "chunk") for r in body["results"]] == ["faq", "chunk"]


async def test_a_mentions_targets_bound_the_search(kit: Kit) -> None:
    """SPEC A-11: tags and document ids resolve to targets in scope; the search then
    reads only those documents (and no FAQ base)."""
    faq = await _faq_kb(kit)
    kb = await kit.store.create_knowledge_base(kit.tenant, "plans")
    basic, _ = await kit.store.add_document(
        kit.tenant, kb, "basic", "The basic plan costs 10 euros."
    )
    pro, _ = await kit.store.add_document(kit.tenant, kb, "pro", "The pro plan costs 30 euros.")
    mine = {"tenant_id": kit.tenant}
    tagged = await kit.http.put(f"/internal/documents/{pro}/tags",
                                json={**mine, "tags": ["pricing", "pro", "pro"]})  # fmt: skip
    assert tagged.json() == {"id": pro, "tags": ["pricing", "pro"]}
    targets = await kit.http.post(
        "/internal/search-targets", json={**mine, "knowledge_base_ids": [kb, faq], "tags": ["pro"]}
    )
    assert targets.json() == {"targets": [{"knowledge_base_id": kb, "document_id": pro}]}
    unknown = await kit.http.post("/internal/search-targets",
                                  json={**mine, "document_ids": [basic, "doc_nope"]})  # fmt: skip
    assert unknown.status_code == 404 and "doc_nope" in unknown.text
    untagged = await kit.http.post("/internal/search-targets", json={**mine, "tags": ["none"]})
    assert untagged.status_code == 422 and "none" in untagged.text
    bad_tag = await kit.http.put(f"/internal/documents/{pro}/tags",
                                 json={**mine, "tags": ["../etc"]})  # fmt: skip
    assert bad_tag.status_code == 422

    scope = {"knowledge_base_ids": [kb, faq]}
    everything, _ = await kit.search({"query": "plan costs euros", "mode": "keyword"}, **scope)
    assert len(everything["results"]) == 2
    for mode in ("keyword", "hybrid"):
        narrowed, data = await kit.search(
            {"query": "plan costs euros", "mode": mode}, document_ids=[pro], **scope
        )
        assert [r["content"] for r in narrowed["results"]] == ["The pro plan costs 30 euros."]
        assert {ref["document_id"] for ref in data["references"]} == {pro}
