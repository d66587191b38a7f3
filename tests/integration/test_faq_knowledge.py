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
import numpy as np
import pytest
from fastapi import FastAPI
from redis.asyncio import Redis
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from weft_contracts import ToolContext
from weft_knowledge.api import knowledge_router
from weft_knowledge.faq_embedding import FaqEmbedder, FaqEmbeddingSettings
from weft_knowledge.faq_search import FaqVectorIndex
from weft_knowledge.search import KnowledgeSearch
from weft_knowledge.titles import KnowledgeDirectory
from weft_knowledge.usage import DocumentUsage, ModelUsage
from weft_memory.usage_api import usage_router
from weft_platform.web_snapshots import MemorySnapshotStore
from weft_scripted_llm.embeddings import embed_text
from weft_scripted_llm.tokens import estimate_tokens as provider_tokens
from weft_scripted_llm.tokens import words
from weft_storage.knowledge import faq_jobs
from weft_storage.knowledge.documents import DocumentReader
from weft_storage.knowledge.faq import FaqStore
from weft_storage.knowledge.faq_jobs import FaqEmbeddingQueue
from weft_storage.knowledge.graph import GraphStore
from weft_storage.knowledge.ingest import IngestionQueue
from weft_storage.knowledge.models import FaqEntry
from weft_storage.knowledge.store import KnowledgeStore
from weft_storage.memory.models_usage import UsageRecord
from weft_tool_catalog import ToolInvocation, ToolRegistry
from weft_tool_catalog.registry import ToolOutcome
from weft_tools.aliases import RedisAliasBook
from weft_tools.builtin import ToolDependencies, builtin_registry
from weft_tools.embeddings import OpenAIEmbedder, embed_counted, estimate_tokens
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
        memory = FastAPI()
        memory.include_router(usage_router(sessions))  # memory's own route, same database
        self.memory = httpx.ASGITransport(memory)
        self.usage = ModelUsage("http://memory", lambda: "", transport=self.memory)
        self.jobs = FaqEmbeddingQueue(sessions)
        self.sessions = sessions
        knowledge = KnowledgeClient("http://knowledge", transport=transport)
        self.registry: ToolRegistry = builtin_registry(
            ToolDependencies(
                knowledge=knowledge, sessions=sessions, snapshots=MemorySnapshotStore(),
                aliases=RedisAliasBook(redis),
            )
        )  # fmt: skip
        self.tenant = f"t-{secrets.token_hex(4)}"
        self.workers = FaqEmbedder(
            self.jobs, embedder, self.usage,
            FaqEmbeddingSettings(tenants=(self.tenant,), retry_backoff_s=0),
        )  # fmt: skip

    async def drain(self) -> int:
        """Run this tenant's FAQ embedding jobs as an ingestion worker does; how many."""
        ran = 0
        while await self.workers.embed_next():
            ran += 1
        return ran

    async def search(self, args: dict[str, Any], **context: Any) -> tuple[dict[str, Any], Any]:
        outcome = await self.tool("search_knowledge", args, **context)
        assert outcome.success, outcome.error
        return json.loads(outcome.output), outcome.data

    async def tool(self, name: str, args: dict[str, Any], **context: Any) -> ToolOutcome:
        ctx = ToolContext(user_id="u", agent_id="a", **context)
        call = ToolInvocation(
            tenant_id=self.tenant, session_id=f"s-{secrets.token_hex(3)}", request_id="r",
            arguments=args, context=ctx,
        )  # fmt: skip
        return await self.registry.execute(name, call)


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
    assert imported.status_code == 201 and imported.json()["imported"] == 2, imported.text
    assert imported.json()["embedding_job"].startswith("fqj_")
    await kit.drain()
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
    reads only those documents (and no FAQ entry: none carries the tags)."""
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
    assert targets.json() == {
        "targets": [{"knowledge_base_id": kb, "document_id": pro}],
        "faq_targets": [],
    }
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


class FailingEmbedder:
    def __init__(self, failures: int):
        self.failures = failures
        self.calls = 0

    async def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        if self.failures:
            self.failures -= 1
            raise RuntimeError("embedding endpoint down")
        return [embed_text(t, 64) for t in texts]


async def _empty_faq_kb(kit: Kit) -> str:
    body = {"tenant_id": kit.tenant, "name": "f", "kind": "faq"}
    made = await kit.http.post("/internal/knowledge-bases", json=body)
    kb_id: str = made.json()["id"]
    return kb_id


async def _usage_rows(kit: Kit) -> list[tuple[str, str, int, int]]:
    async with kit.sessions() as s:
        rows = await s.execute(
            select(UsageRecord.source, UsageRecord.source_id, UsageRecord.input_tokens,
                   UsageRecord.llm_calls).where(UsageRecord.tenant_id == kit.tenant)
        )  # fmt: skip
        return [(r[0], r[1], int(r[2]), int(r[3])) for r in rows.all()]


async def _kb_view(kit: Kit, kb: str) -> dict[str, Any]:
    shown = await kit.http.get(f"/internal/knowledge-bases/{kb}", params={"tenant_id": kit.tenant})
    assert shown.status_code == 200, shown.text
    view: dict[str, Any] = shown.json()
    return view


async def test_an_import_queues_its_embeddings_and_the_worker_meters_them(kit: Kit) -> None:
    """SPEC C-04: the import stores the entries (keyword-searchable at once) and queues
    their embeddings; a worker embeds them off the request path, the progress is on the
    KB, and the job's tokens are metered once through memory's usage route."""
    made = await kit.http.post(
        "/internal/knowledge-bases", json={"tenant_id": kit.tenant, "name": "faq", "kind": "faq"}
    )
    kb = made.json()["id"]
    imported = await kit.http.post(
        f"/internal/knowledge-bases/{kb}/faq/import",
        params={"tenant_id": kit.tenant, "file_name": "faq.csv", "user_id": "u-1"},
        content=FAQ_CSV,
    )  # fmt: skip
    job = imported.json()["embedding_job"]
    queued = (await _kb_view(kit, kb))["faq"]
    assert queued["entries"] == 2 and queued["embedded"] == 0, queued
    assert queued["jobs"]["pending"] == 1, queued
    body, _ = await kit.search({"query": "forgot my password", "mode": "keyword"},
                               knowledge_base_ids=[kb])  # fmt: skip
    assert body["results"][0]["type"] == "faq"  # keyword search before any embedding
    semantic, _ = await kit.search({"query": "forgot my password", "mode": "semantic"},
                                   knowledge_base_ids=[kb])  # fmt: skip
    assert semantic["mode_fallbacks"][0]["reason"] == "no embeddings yet"

    assert await kit.drain() == 1
    done = (await _kb_view(kit, kb))["faq"]
    assert done["embedded"] == 2 and done["jobs"]["ready"] == 1 and done["error"] is None, done
    [(source, source_id, tokens, calls)] = await _usage_rows(kit)
    assert (source, source_id) == ("embedding", job) and tokens > 0 and calls == 1
    semantic, _ = await kit.search({"query": "forgot my password", "mode": "semantic"},
                                   knowledge_base_ids=[kb])  # fmt: skip
    assert "mode_fallbacks" not in semantic and semantic["results"][0]["type"] == "faq"
    assert await kit.drain() == 0  # nothing left: a ready job is never run again


async def test_a_failing_embedder_is_retried_then_the_job_fails_visibly(kit: Kit) -> None:
    """Retried, bounded: each failed attempt is put back after its backoff; the last
    one fails the job with its reason on the KB; the entries stay searchable by
    keyword, and nothing is metered for calls that never answered."""
    kb = await _empty_faq_kb(kit)
    await kit.http.post(
        f"/internal/knowledge-bases/{kb}/faq/import",
        params={"tenant_id": kit.tenant, "file_name": "faq.csv"}, content=FAQ_CSV,
    )  # fmt: skip
    failing = FailingEmbedder(failures=10)
    worker = FaqEmbedder(kit.jobs, failing, kit.usage,
                         FaqEmbeddingSettings(tenants=(kit.tenant,), max_attempts=3,
                                              retry_backoff_s=0))  # fmt: skip
    while await worker.embed_next():
        pass
    assert failing.calls == 3  # three attempts, then no more
    view = (await _kb_view(kit, kb))["faq"]
    assert view["jobs"]["failed"] == 1 and "embedding endpoint down" in view["error"], view
    assert view["embedded"] == 0
    body, _ = await kit.search({"query": "support hours", "mode": "keyword"},
                               knowledge_base_ids=[kb])  # fmt: skip
    assert body["results"][0]["type"] == "faq"
    assert await _usage_rows(kit) == []


async def test_an_attempt_memory_refused_is_retried_and_metered_once(kit: Kit) -> None:
    """Idempotent: an attempt whose usage memory did not take is retried; the retry
    embeds nothing twice and reports the same total, stored once."""
    kb = await _empty_faq_kb(kit)
    imported = await kit.http.post(
        f"/internal/knowledge-bases/{kb}/faq/import",
        params={"tenant_id": kit.tenant, "file_name": "faq.csv"}, content=FAQ_CSV,
    )  # fmt: skip
    job = imported.json()["embedding_job"]
    down = ModelUsage("http://memory", lambda: "",
                      transport=httpx.MockTransport(lambda r: httpx.Response(503)))  # fmt: skip
    embedder = FailingEmbedder(failures=0)
    settings = FaqEmbeddingSettings(tenants=(kit.tenant,), retry_backoff_s=0)
    assert await FaqEmbedder(kit.jobs, embedder, down, settings).embed_next()
    view = (await _kb_view(kit, kb))["faq"]
    assert view["embedded"] == 2 and view["jobs"]["pending"] == 1, view
    assert "memory did not take" in view["error"]
    assert await _usage_rows(kit) == []
    assert await FaqEmbedder(kit.jobs, embedder, kit.usage, settings).embed_next()
    assert embedder.calls == 1  # the retry embedded nothing again
    [(source, source_id, tokens, calls)] = await _usage_rows(kit)
    assert (source, source_id, calls) == ("embedding", job, 1) and tokens > 0
    assert (await _kb_view(kit, kb))["faq"]["jobs"]["ready"] == 1


async def test_an_entry_replaced_while_queued_gets_its_new_questions_vector(kit: Kit) -> None:
    """A replace queues a newer job; the older one never writes its stale vector on the
    entry."""
    kb = await _empty_faq_kb(kit)
    base = f"/internal/knowledge-bases/{kb}/faq/entries"
    mine = {"tenant_id": kit.tenant}
    entry = (await kit.http.post(base, json={**mine, "question": "Where do I park?",
                                             "answer": "Level -2."})).json()  # fmt: skip
    canteen = {"question": "When is the canteen open?", "answer": "Noon."}
    await kit.http.put(f"{base}/{entry['id']}", json={**mine, **canteen})
    assert await kit.drain() == 2
    async with kit.sessions() as s:
        stored = await s.scalar(select(FaqEntry.embedding).where(FaqEntry.id == entry["id"]))
    assert stored is not None
    expected = embed_text("When is the canteen open?", 64)
    assert max(abs(a - b) for a, b in zip(stored, expected, strict=True)) < 1e-5
    assert (await _kb_view(kit, kb))["faq"]["jobs"] == {
        "pending": 0,
        "processing": 0,
        "ready": 2,
        "failed": 0,
    }


async def _plans(kit: Kit) -> tuple[str, str, str]:
    """A document base with a basic and a pro plan (the pro one tagged ``pro``)."""
    kb = await kit.store.create_knowledge_base(kit.tenant, "plans")
    basic, _ = await kit.store.add_document(
        kit.tenant, kb, "basic", "The basic plan costs 10 euros. Support hours apply."
    )
    pro, _ = await kit.store.add_document(kit.tenant, kb, "pro", "The pro plan costs 30 euros.")
    tagged = await kit.http.put(
        f"/internal/documents/{pro}/tags", json={"tenant_id": kit.tenant, "tags": ["pro"]}
    )
    assert tagged.status_code == 200, tagged.text
    return kb, basic, pro


async def test_an_at_tag_mention_selects_the_faq_entries_carrying_it(kit: Kit) -> None:
    """SPEC A-11 with FAQ bases: an ``@tag`` resolves to the documents and to the FAQ
    entries that carry it; the search then reads those entries and no other, and a tag
    only FAQ entries carry reads no document."""
    faq = await _faq_kb(kit)
    kb, basic, pro = await _plans(kit)
    mine = {"tenant_id": kit.tenant, "knowledge_base_ids": [kb, faq]}
    found = (await kit.http.post("/internal/search-targets",
                                 json={**mine, "tags": ["support"]})).json()  # fmt: skip
    assert found == {"targets": [], "faq_targets": [{"knowledge_base_id": faq, "tag": "support"}]}
    both = (await kit.http.post("/internal/search-targets",
                                json={**mine, "tags": ["pro", "account"]})).json()  # fmt: skip
    assert both["targets"] == [{"knowledge_base_id": kb, "document_id": pro}]
    assert both["faq_targets"] == [{"knowledge_base_id": faq, "tag": "account"}]

    scope = {"knowledge_base_ids": [kb, faq]}
    for mode in ("keyword", "semantic", "hybrid"):
        body, _ = await kit.search({"query": "support hours password", "mode": mode},
                                   faq_tags=["support"], **scope)  # fmt: skip
        contents = [r["content"] for r in body["results"]]
        assert contents and all("Support answers" in c for c in contents), (mode, contents)
    body, _ = await kit.search({"query": "plan costs password reset", "mode": "keyword"},
                               document_ids=[pro], faq_tags=["account"], **scope)  # fmt: skip
    contents = sorted(r["content"] for r in body["results"])
    assert len(contents) == 2 and "pro plan" in contents[1] and "reset link" in contents[0]
    assert basic not in json.dumps(body)


async def test_read_and_list_documents_are_bounded_by_a_mention(kit: Kit) -> None:
    """SPEC A-11 (reference: read_document checks the @mention scope; list_documents
    applies @file/@tag before paging, its total and next page limited to them)."""
    kb, basic, pro = await _plans(kit)
    scope = {"knowledge_base_ids": [kb]}
    free = await kit.tool("list_documents", {}, **scope)
    assert json.loads(free.output)["total"] == 2
    listed = await kit.tool("list_documents", {"page_size": 1}, document_ids=[pro], **scope)
    page = json.loads(listed.output)
    assert page["total"] == 1 and "next_page" not in page
    assert [d["title"] for d in page["documents"]] == ["pro"]
    faq_only = await kit.tool("list_documents", {}, faq_tags=["support"], **scope)
    assert json.loads(faq_only.output)["total"] == 0

    read = await kit.tool("read_document", {"id": pro}, document_ids=[pro], **scope)
    assert read.success and "pro plan" in read.output
    refused = await kit.tool("read_document", {"id": basic}, document_ids=[pro], **scope)
    assert not refused.success and "not found" in (refused.error or "")
    assert "basic plan" not in (refused.output or "")
    by_chunk, _ = await kit.search({"query": "basic plan", "mode": "keyword"}, **scope)
    handle = by_chunk["results"][0]["id"]
    # A chunk handle of a document the mention leaves out is refused as well.
    outcome = await kit.tool("read_document", {"id": handle}, document_ids=[pro], **scope)
    assert not outcome.success
    unmentioned = await kit.tool("read_document", {"id": basic}, **scope)
    assert unmentioned.success and "basic plan" in unmentioned.output


async def test_the_faq_vector_index_reloads_only_when_a_bases_vectors_change(kit: Kit) -> None:
    """Semantic search over FAQ bases reads the vectors once per version of the base,
    not on every query; a newly embedded entry is found at once after."""
    kb = await _faq_kb(kit)
    index = FaqVectorIndex(kit.faq)
    query = np.asarray(embed_text("canteen opening hours", 64), dtype=np.float32)
    await index.search(kit.tenant, kb, query, 5)
    await index.search(kit.tenant, kb, query, 5)
    assert index.loads == 1
    entry = {"tenant_id": kit.tenant, "question": "canteen opening hours", "answer": "Noon.",
             "tag": "food"}  # fmt: skip
    made = await kit.http.post(f"/internal/knowledge-bases/{kb}/faq/entries", json=entry)
    await kit.drain()
    found = await index.search(kit.tenant, kb, query, 5)
    assert index.loads == 2 and found[0][0] == made.json()["id"]
    support = await index.search(kit.tenant, kb, query, 5, tags=["support"])
    assert made.json()["id"] not in {i for i, _ in support}
    assert [i for i, _ in await index.search(kit.tenant, kb, query, 5, tags=["food"])] == [
        made.json()["id"]
    ]


async def test_a_batch_read_before_a_replace_never_lands_on_the_new_question(kit: Kit) -> None:
    """The race the job guard closes: a worker read the old question, the entry is
    replaced (a newer job owes it), then the worker stores its batch."""
    kb = await _empty_faq_kb(kit)
    base = f"/internal/knowledge-bases/{kb}/faq/entries"
    mine = {"tenant_id": kit.tenant}
    entry = (await kit.http.post(base, json={**mine, "question": "Old?", "answer": "a"})).json()
    job = await kit.jobs.claim(tenants=(kit.tenant,))
    assert job is not None
    [owed] = await kit.jobs.owed(job, 10)
    await kit.http.put(f"{base}/{entry['id']}", json={**mine, "question": "New?", "answer": "b"})
    await kit.jobs.save_batch(job, [owed.id], [embed_text(owed.question, 64)], 1)
    async with kit.sessions() as s:
        stored = await s.scalar(select(FaqEntry.embedding).where(FaqEntry.id == entry["id"]))
    assert stored is None  # the newer job will embed "New?"


async def test_a_bases_ready_jobs_are_bounded(kit: Kit, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bounded queue: however often entries are rewritten, a base keeps its newest ready
    jobs only (KEEP_READY), pending and failed ones untouched."""
    monkeypatch.setattr(faq_jobs, "KEEP_READY", 2)
    kb = await _empty_faq_kb(kit)
    base = f"/internal/knowledge-bases/{kb}/faq/entries"
    for n in range(4):
        entry = {"tenant_id": kit.tenant, "question": f"Question {n}?", "answer": "a"}
        assert (await kit.http.post(base, json=entry)).status_code == 201
        await kit.drain()
    view = (await _kb_view(kit, kb))["faq"]
    assert view["jobs"]["ready"] == 2 and view["embedded"] == 4, view


async def test_the_openai_embedder_counts_the_providers_tokens(scripted_llm: str) -> None:
    """What a job meters is the provider's ``usage.prompt_tokens`` over real HTTP (the
    scripted OpenAI-compatible double), summed over the embedder's batches."""
    embedder = OpenAIEmbedder(base_url=f"{scripted_llm}/v1", api_key="k", model="e", batch_size=2)
    texts = ["How do I reset my password?", "What are the support hours?", "?!" * 40]
    vectors, tokens = await embed_counted(embedder, texts)
    counted = sum(provider_tokens(" ".join(words(t))) for t in texts)  # the double's count
    assert len(vectors) == 3 and tokens == counted != estimate_tokens(texts)
    _, first = await embedder.embed_counted(texts[:2])
    _, last = await embedder.embed_counted(texts[2:])
    assert tokens == first + last
    assert await embed_counted(ScriptedEmbedder(), texts) == (
        await ScriptedEmbedder().embed(texts),
        estimate_tokens(texts),
    )


async def test_a_job_whose_worker_died_is_taken_over(kit: Kit) -> None:
    """A claim older than the stale bound (its worker died mid-job) is claimed again by
    another worker, which embeds what is left; a fresh claim is never taken twice."""
    kb = await _empty_faq_kb(kit)
    mine = {"tenant_id": kit.tenant, "question": "Where do I park?", "answer": "Level -2."}
    await kit.http.post(f"/internal/knowledge-bases/{kb}/faq/entries", json=mine)
    died = await kit.jobs.claim(tenants=(kit.tenant,))
    assert died is not None and died.attempts == 1
    assert await kit.jobs.claim(tenants=(kit.tenant,)) is None  # in progress, not stale
    eager = FaqEmbeddingQueue(kit.sessions, stale_after_s=0)
    settings = FaqEmbeddingSettings(tenants=(kit.tenant,))
    assert await FaqEmbedder(eager, ScriptedEmbedder(), kit.usage, settings).embed_next()
    view = (await _kb_view(kit, kb))["faq"]
    assert view["embedded"] == 1 and view["jobs"]["ready"] == 1, view
    [(source, source_id, _, _)] = await _usage_rows(kit)
    assert (source, source_id) == ("embedding", died.id)
