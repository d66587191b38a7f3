"""Knowledge ingestion and the knowledge tools on the real PostgreSQL and Redis
(SPEC T-07 search_knowledge, T-08 read_document, T-09 list_documents, T-12 files).

The embedder is the scripted LLM test double's own deterministic function (the vectors
its ``/embeddings`` endpoint returns), called in-process. The tools reach the knowledge
service's routes in-process (``httpx.ASGITransport``), as tool-exec reaches knowledge.
"""

from __future__ import annotations

import io
import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from openpyxl import Workbook
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from weft_contracts import ToolContext
from weft_knowledge.api import knowledge_router
from weft_knowledge.ingestion import DocumentIngestor
from weft_knowledge.search import KnowledgeSearch
from weft_knowledge.titles import KnowledgeDirectory
from weft_knowledge.usage import DocumentUsage
from weft_platform.web_snapshots import MemorySnapshotStore
from weft_scripted_llm.embeddings import embed_text
from weft_storage.knowledge.documents import DocumentReader
from weft_storage.knowledge.graph import GraphStore
from weft_storage.knowledge.ingest import IngestionQueue
from weft_storage.knowledge.store import KnowledgeStore
from weft_tool_catalog import ToolInvocation, ToolRegistry
from weft_tools.aliases import RedisAliasBook
from weft_tools.builtin import ToolDependencies, builtin_registry
from weft_tools.knowledge_client import KnowledgeClient


class ScriptedEmbedder:
    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [embed_text(t, 256) for t in texts]


def minimal_pdf(text: str) -> bytes:
    """A one-page PDF whose page draws ``text`` (xref rebuilt by the reader)."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(
        b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    )
    return out.getvalue()


def workbook() -> bytes:
    book = Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.title = "Q1"
    for row in (["Region", "Revenue"], ["North", 120], ["South", 80]):
        sheet.append(row)
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def migrated(infra: dict[str, str], own_database: str) -> dict[str, str]:
    """The infrastructure with a database of this module's own: the Kit ingests with
    scripted embeddings, which a stack's worker must not do first."""
    return {**infra, "WEFT_DATABASE_URL": own_database}


@pytest.fixture
async def engine(migrated: dict[str, str]) -> AsyncIterator[AsyncEngine]:
    eng = create_async_engine(migrated["WEFT_DATABASE_URL"])
    yield eng
    await eng.dispose()


@pytest.fixture
async def redis(migrated: dict[str, str]) -> AsyncIterator[Redis]:
    client = Redis.from_url(migrated["WEFT_REDIS_URL"])
    yield client
    await client.aclose()


class Kit:
    def __init__(self, engine: AsyncEngine, redis: Redis):
        sessions = async_sessionmaker(engine, expire_on_commit=False)
        self.store = KnowledgeStore(sessions)
        self.queue = IngestionQueue(sessions)
        self.reader = DocumentReader(sessions)
        self.ingestor = DocumentIngestor(self.queue, ScriptedEmbedder(), batch_size=4)
        search = KnowledgeSearch(self.store, self.reader, embedder=ScriptedEmbedder())
        api = FastAPI()
        api.include_router(
            knowledge_router(
                self.store, self.reader, self.queue, search,
                DocumentUsage("http://memory.invalid", lambda: ""),  # no upload here
                KnowledgeDirectory(sessions), GraphStore(sessions), document_wait_s=0,
            )
        )  # fmt: skip
        knowledge = KnowledgeClient("http://knowledge", transport=httpx.ASGITransport(api))
        self.registry: ToolRegistry = builtin_registry(
            ToolDependencies(
                knowledge=knowledge, sessions=sessions, snapshots=MemorySnapshotStore(),
                aliases=RedisAliasBook(redis),
            )
        )  # fmt: skip
        self.tenant = f"t-{secrets.token_hex(4)}"
        self.session = f"s-{secrets.token_hex(4)}"

    async def ingest_all(self) -> None:
        while await self.ingestor.ingest_next():
            pass

    async def call(
        self, tool: str, args: dict[str, Any], kbs: list[str], limit: int = 24000
    ) -> tuple[bool, Any]:
        ctx = ToolContext(user_id="u", agent_id="a", knowledge_base_ids=kbs, max_output_chars=limit)
        call = ToolInvocation(
            tenant_id=self.tenant, session_id=self.session, request_id="r",
            arguments=args, context=ctx,
        )  # fmt: skip
        outcome = await self.registry.execute(tool, call)
        if not outcome.success:
            return False, outcome.error
        return True, json.loads(outcome.output)


@pytest.fixture
async def kit(engine: AsyncEngine, redis: Redis) -> Kit:
    return Kit(engine, redis)


@pytest.fixture
async def kb(kit: Kit) -> str:
    kb_id = await kit.store.create_knowledge_base(kit.tenant, "handbook")
    files = {
        "refunds.md": b"# Refunds\n\nAnnual plans are refunded within 30 days of purchase.",
        "security.txt": b"Customer data is encrypted with AES-256 at rest in Frankfurt.",
        "sales.xlsx": workbook(),
        "offices.pdf": minimal_pdf("The Lisbon office opens at nine in the morning."),
        "staff.csv": b"Name,Team\nAda,Platform\nGrace,Search\n",
    }
    for name, content in files.items():
        await kit.queue.enqueue_file(kit.tenant, kb_id, title=name, file_name=name, content=content)
    await kit.ingest_all()
    return kb_id


async def test_every_supported_file_type_is_ingested_with_progress(kit: Kit, kb: str) -> None:
    total, docs = await kit.reader.list_documents(kit.tenant, [kb], size=10)
    assert total == 5
    for doc in docs:
        assert doc.status == "ready", (doc.file_name, doc.error)
        assert doc.chunk_count >= 1 and doc.embedded_count == doc.chunk_count


async def test_unsupported_file_fails_with_a_reason(kit: Kit, kb: str) -> None:
    await kit.queue.enqueue_file(kit.tenant, kb, title="x", file_name="x.exe", content=b"MZ")
    await kit.ingest_all()
    _, docs = await kit.reader.list_documents(kit.tenant, [kb], keyword="x.exe")
    assert docs[0].status == "failed" and "unsupported" in str(docs[0].error)


@pytest.mark.parametrize("mode", ["keyword", "semantic", "hybrid"])
async def test_search_modes_find_the_passage_with_short_ids(kit: Kit, kb: str, mode: str) -> None:
    ok, body = await kit.call(
        "search_knowledge", {"query": "annual plans refunded", "mode": mode}, [kb]
    )
    assert ok, body
    assert body["requested_mode"] == mode and "mode_fallbacks" not in body
    top = body["results"][0]
    assert "30 days" in top["content"] and top["id"].startswith("c")
    assert "doc_" not in json.dumps(body) and "chk_" not in json.dumps(body)  # SPEC E-22
    assert body["documents"][top["document"]]["title"] == "refunds.md"


async def test_pdf_and_spreadsheet_text_are_searchable(kit: Kit, kb: str) -> None:
    ok, body = await kit.call("search_knowledge", {"query": "Lisbon office opens"}, [kb])
    assert ok and "nine in the morning" in body["results"][0]["content"]
    ok, body = await kit.call(
        "search_knowledge", {"query": "North revenue", "mode": "keyword"}, [kb]
    )
    assert ok and "revenue: 120" in body["results"][0]["content"]


async def test_kb_without_embeddings_falls_back_to_keyword_and_says_so(kit: Kit) -> None:
    plain = await kit.store.create_knowledge_base(kit.tenant, "plain")
    await kit.store.add_document(kit.tenant, plain, "Hours", "Support answers from 8am to 6pm.")
    ok, body = await kit.call(
        "search_knowledge", {"query": "support hours 8am", "mode": "semantic"}, [plain]
    )
    assert ok, body
    assert body["mode_fallbacks"][0]["to"] == "keyword"
    assert body["mode_fallbacks"][0]["knowledge_base"].startswith("b")
    assert plain not in json.dumps(body)  # SPEC E-22: the KB by its handle only
    assert "8am" in body["results"][0]["content"]


async def test_unrelated_query_is_rerank_rejected_with_a_keyword_hint(kit: Kit, kb: str) -> None:
    # one content word of seven matches (1/7 < 0.15): every candidate is rejected
    query = "zebra giraffe lion tiger elephant hippo customer"
    ok, body = await kit.call("search_knowledge", {"query": query}, [kb])
    assert ok and body["results"] == [] and body["rerank_rejected"] is True
    assert "keyword" in body["hint"]


async def test_output_budget_trims_from_the_bottom_with_a_marker(kit: Kit) -> None:
    big = await kit.store.create_knowledge_base(kit.tenant, "big")
    for i in range(6):
        await kit.store.add_document(
            kit.tenant, big, f"Policy {i}", f"Policy {i}: refund rules " * 20
        )
    ok, body = await kit.call(
        "search_knowledge", {"query": "refund rules policy", "mode": "keyword"}, [big], 1200
    )
    assert ok and 'reason="output_budget"' in body["omitted"]
    assert body["count"] == len(body["results"]) < 6


async def test_no_index_in_scope_is_an_error(kit: Kit) -> None:
    empty = await kit.store.create_knowledge_base(kit.tenant, "empty")
    ok, error = await kit.call("search_knowledge", {"query": "anything"}, [empty])
    assert not ok and "no knowledge base in scope" in error


async def test_read_document_pages_neighbours_and_in_document_search(kit: Kit, kb: str) -> None:
    long_kb = await kit.store.create_knowledge_base(kit.tenant, "long")
    text = "\n\n".join(f"Section {i}. " + "filler words here. " * 25 for i in range(12))
    text += "\n\nThe secret ingredient is Cardamom."
    await kit.store.add_document(kit.tenant, long_kb, "Manual", text)
    ok, listing = await kit.call("list_documents", {"keyword": "manu"}, [long_kb])
    assert ok and listing["total"] == 1
    handle = listing["documents"][0]["id"]
    ok, page = await kit.call("read_document", {"id": handle, "limit": 3}, [long_kb])
    assert ok and [c["offset"] for c in page["chunks"]] == [0, 1, 2] and page["next_offset"] == 3
    ok, found = await kit.call(
        "read_document", {"id": handle, "query": "cardamom SECRET"}, [long_kb]
    )
    assert ok and len(found["hits"]) == 1
    ok, around = await kit.call("read_document", {"id": found["hits"][0], "context": 2}, [long_kb])
    assert ok and any("Cardamom" in c["content"] for c in around["chunks"])
    ok, regex = await kit.call(
        "read_document", {"id": handle, "query": r"Section 1[01]\.", "regex": True}, [long_kb]
    )
    assert ok and len(regex["hits"]) == 2


async def test_documents_outside_scope_or_tenant_are_not_readable(
    kit: Kit, kb: str, engine: AsyncEngine, redis: Redis
) -> None:
    _, listing = await kit.call("list_documents", {}, [kb])
    handle = listing["documents"][0]["id"]
    other_kb = await kit.store.create_knowledge_base(kit.tenant, "other")
    ok, error = await kit.call("read_document", {"id": handle}, [other_kb])
    assert not ok and "not found" in error
    stranger = Kit(engine, redis)
    stranger.session = kit.session  # same session id, other tenant: handles do not carry over
    ok, error = await stranger.call("read_document", {"id": handle}, [])
    assert not ok


async def test_data_analysis_reads_the_uploaded_workbook_by_handle(kit: Kit, kb: str) -> None:
    _, listing = await kit.call("list_documents", {"keyword": "sales"}, [kb])
    handle = listing["documents"][0]["id"]
    ok, body = await kit.call(
        "data_analysis", {"knowledge_id": handle, "sql": "SELECT sum(revenue) FROM dataset"}, [kb]
    )
    assert ok and body["rows"] == [[200]]
