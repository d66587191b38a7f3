"""The knowledge graph on the real PostgreSQL (SPEC T-10): extraction in the ingestion
worker with an in-process model double, the per-KB query (names, relations with their
source chunks, the recursive path), retries, metering, and what a replaced document takes
with it."""

from __future__ import annotations

import json
import secrets
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_knowledge.graph_extraction import ExtractionSettings, GraphExtractor
from weft_knowledge.ingestion import DocumentIngestor
from weft_knowledge.ingestion_loop import IngestionLoop
from weft_knowledge.usage import ModelUsage
from weft_llm import Usage
from weft_storage.knowledge.graph import GraphStore, name_probe, normalize_name
from weft_storage.knowledge.ingest import IngestionQueue
from weft_storage.knowledge.models_graph import GraphEntity
from weft_storage.knowledge.store import KnowledgeStore
from weft_testkit.function_model import answer, queued

ACME = {
    "entities": [
        {"name": "Acme Corp", "type": "organisation", "description": "Makes anvils."},
        {"name": "Jane Roe", "type": "person"},
        {"name": "Springfield", "type": "place"},
    ],
    "relations": [
        {"source": "Jane Roe", "relation": "founded", "target": "Acme Corp"},
        {"source": "Acme Corp", "relation": "is based in", "target": "Springfield"},
        {"source": "Nobody", "relation": "ghost", "target": "Acme Corp"},
    ],
}
GLOBEX = {
    "entities": [{"name": "Globex", "type": "organisation"}, {"name": "Springfield"}],
    "relations": [{"source": "Globex", "relation": "rents offices in", "target": "Springfield"}],
}


@pytest.fixture(scope="module")
def migrated(own_database: str) -> str:
    """A database of this module's own: the ingestion workers of stacks running meanwhile
    would claim the extractions these tests queue."""
    return own_database


class Metered:
    """memory's usage route, as a transport: what knowledge sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def transport(self) -> httpx.MockTransport:
        def handle(request: httpx.Request) -> httpx.Response:
            self.sent.append((request.url.path, json.loads(request.content)))
            return httpx.Response(204)

        return httpx.MockTransport(handle)


async def _ingest(
    sessions: async_sessionmaker[AsyncSession], tenant: str, kb: str, text: str
) -> str:
    queue = IngestionQueue(sessions)
    doc = await queue.enqueue_file(tenant, kb, title="Acme", file_name="a.md",
                                   content=text.encode())  # fmt: skip
    ingestor = DocumentIngestor(queue, None, tenant_max_inflight=100)
    while await ingestor.ingest_next():
        pass
    return doc


def _extractor(
    sessions: async_sessionmaker[AsyncSession], replies: list[Any], metered: Metered | None = None
) -> GraphExtractor:
    usage = None
    if metered is not None:
        usage = ModelUsage("http://memory", lambda: "token", transport=metered.transport())
    return GraphExtractor(
        GraphStore(sessions), queued(replies), usage,
        ExtractionSettings(model="m", max_attempts=2, retry_backoff_s=0.0),
    )  # fmt: skip


async def _drain(extractor: GraphExtractor) -> None:
    while await extractor.extract_next():
        pass


def test_names_are_normalised_and_probed() -> None:
    assert normalize_name("  ACME   Corp. ") == "acme corp"
    probe = name_probe("Who founded Acme Corp?")
    assert "acme corp" in probe.exact and "who founded acme corp" in probe.exact
    assert "who" not in probe.exact  # a short word alone matches nothing
    assert probe.prefixes[0] == "founded"
    huge = name_probe("word " * 100_000)
    assert len(huge.exact) <= 200 and len(huge.prefixes) <= 8


async def test_extraction_builds_a_graph_that_a_query_reads_with_sources(
    sessions: async_sessionmaker[AsyncSession],
) -> None:  # SPEC T-10
    store = KnowledgeStore(sessions)
    tenant = f"t-{secrets.token_hex(4)}"
    kb = await store.create_knowledge_base(tenant, "graph", graph_enabled=True)
    plain = await store.create_knowledge_base(tenant, "plain")
    text = "Jane Roe founded Acme Corp, an anvil maker based in Springfield."
    await _ingest(sessions, tenant, plain, text)  # no graph: nothing queued
    doc = await _ingest(sessions, tenant, kb, text)
    metered = Metered()
    usage = Usage(prompt_tokens=120, completion_tokens=40, total_tokens=160)
    await _drain(_extractor(sessions, [answer(json.dumps(ACME), usage=usage)], metered))

    graph = GraphStore(sessions)
    progress = await graph.progress(tenant, kb)
    assert progress["documents_ready"] == 1 and progress["entities"] == 3
    assert progress["relations"] == 2  # the relation to an unlisted entity is not stored
    assert await graph.progress(tenant, plain) == {**dict.fromkeys(progress, 0)}

    hits = await graph.query(tenant, kb, "Who founded Acme Corp?")
    assert hits.entities[0].name == "Acme Corp"
    founded = next(r for r in hits.relations if r.relation == "founded")
    assert (founded.source, founded.target) == ("Jane Roe", "Acme Corp")
    assert "anvil maker" in founded.content and founded.title == "Acme"
    prefix = await graph.query(tenant, kb, "tell me about springf")
    assert [e.name for e in prefix.entities] == ["Springfield"]  # a long word's prefix
    assert (await graph.query(tenant, kb, "the sky")).entities == []
    ((path, body),) = metered.sent
    assert path == f"/internal/usage/model-calls/{doc}:1"
    assert body == {"tenant_id": tenant, "source": "graph", "input_tokens": 120,
                    "output_tokens": 40, "llm_calls": 1}  # fmt: skip


async def test_a_path_joins_two_entities_through_others(
    sessions: async_sessionmaker[AsyncSession],
) -> None:  # SPEC T-10: the recursive query's one use
    store = KnowledgeStore(sessions)
    tenant = f"t-{secrets.token_hex(4)}"
    kb = await store.create_knowledge_base(tenant, "graph", graph_enabled=True)
    await _ingest(sessions, tenant, kb, "Jane Roe founded Acme Corp in Springfield.")
    await _ingest(sessions, tenant, kb, "Globex rents offices in Springfield.")
    await _drain(_extractor(sessions, [answer(json.dumps(ACME)), answer(json.dumps(GLOBEX))]))

    hits = await GraphStore(sessions).query(tenant, kb, "How is Jane Roe related to Globex?")
    assert {e.name for e in hits.entities[:2]} == {"Jane Roe", "Globex"}
    chain = [(r.source, r.relation, r.target) for r in hits.path]
    assert len(chain) == 3 and chain[0][0] in {"Jane Roe", "Globex"}
    assert ("Acme Corp", "is based in", "Springfield") in chain


async def test_replacing_a_document_takes_what_it_sourced(
    sessions: async_sessionmaker[AsyncSession],
) -> None:  # SPEC T-10: deleting or replacing a document
    store = KnowledgeStore(sessions)
    tenant = f"t-{secrets.token_hex(4)}"
    kb = await store.create_knowledge_base(tenant, "graph", graph_enabled=True)
    doc = await _ingest(sessions, tenant, kb, "Jane Roe founded Acme Corp in Springfield.")
    await _drain(_extractor(sessions, [answer(json.dumps(ACME))]))
    # The same document read again (its chunks replaced), now naming only Globex.
    queue = IngestionQueue(sessions)
    async with sessions.begin() as s:
        from weft_storage.knowledge.models import Document

        row = await s.get(Document, doc)
        assert row is not None
        row.status = "pending"
    await DocumentIngestor(queue, None).ingest_next()
    await _drain(_extractor(sessions, [answer(json.dumps(GLOBEX))]))
    graph = GraphStore(sessions)
    assert (await graph.query(tenant, kb, "Acme Corp")).entities == []
    async with sessions() as s:
        names = set(
            await s.scalars(select(GraphEntity.name).where(GraphEntity.tenant_id == tenant))
        )
    assert names == {"Globex", "Springfield"}  # Acme and Jane pruned

    async with sessions.begin() as s:  # the document deleted: nothing of it is left
        await s.delete(await s.get(Document, doc))
    assert (await graph.progress(tenant, kb))["relations"] == 0
    assert (await graph.query(tenant, kb, "Globex")).entities == []


async def test_queries_stay_in_their_tenant_and_knowledge_base(
    sessions: async_sessionmaker[AsyncSession],
) -> None:  # invariant 5
    store = KnowledgeStore(sessions)
    tenant, other = f"t-{secrets.token_hex(4)}", f"t-{secrets.token_hex(4)}"
    kb = await store.create_knowledge_base(tenant, "graph", graph_enabled=True)
    sibling = await store.create_knowledge_base(tenant, "graph 2", graph_enabled=True)
    await _ingest(sessions, tenant, kb, "Jane Roe founded Acme Corp.")
    await _drain(_extractor(sessions, [answer(json.dumps(ACME))]))
    graph = GraphStore(sessions)
    assert (await graph.query(tenant, kb, "Acme Corp")).entities
    assert (await graph.query(other, kb, "Acme Corp")).entities == []
    assert (await graph.query(tenant, sibling, "Acme Corp")).entities == []
    assert await graph.graph_enabled(other, [kb]) == {}
    assert (await graph.progress(other, kb))["entities"] == 0
    sql = await graph.query(tenant, kb, "%' OR 1=1 --  acme_corp\\ ")
    assert sql.entities == []


def _graph_gauge(state: str) -> float:
    value = REGISTRY.get_sample_value(
        "weft_knowledge_job_queue_depth", {"queue": "graph", "state": state}
    )
    assert value is not None, state
    return value


async def test_the_worker_reports_the_extraction_queue_by_state(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """weft_knowledge_job_queue_depth (docs/observability.md): an ingested document of a
    graph KB waits as a pending extraction until a worker has extracted it."""
    store = KnowledgeStore(sessions)
    tenant = f"t-{secrets.token_hex(4)}"
    kb = await store.create_knowledge_base(tenant, "graph", graph_enabled=True)
    graph = GraphStore(sessions)
    loop = IngestionLoop(
        DocumentIngestor(IngestionQueue(sessions), None), 1.0,
        depth=IngestionQueue(sessions).depth, job_depths={"graph": graph.depth},
    )  # fmt: skip
    await loop.count_once()
    waiting = _graph_gauge("pending")
    await _ingest(sessions, tenant, kb, "Jane Roe founded Acme Corp in Springfield.")
    await loop.count_once()
    assert _graph_gauge("pending") == waiting + 1
    assert _graph_gauge("processing") == 0  # no worker holds one in this database
    await _drain(_extractor(sessions, [answer(json.dumps(ACME))] * 4))
    await loop.count_once()
    assert _graph_gauge("pending") < waiting + 1
