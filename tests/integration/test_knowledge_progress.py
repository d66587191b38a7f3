"""Wiki and graph progress on ``session.notices`` over the real Kafka, PostgreSQL and Redis
(SPEC T-18, T-10; ARCHITECTURE "Topics": knowledge writes session notices, the gateway's
notices group copies them into the session's stream with their own ids).

A document uploaded with a session gets a ``knowledge_progress`` notice per attempt's end,
signed with knowledge's own service credential and checked by the gateway's consumer;
graph extraction pauses on the tenant's own budget (the one its upload carried, not the
worker's default) as wiki generation does, and says so; a document uploaded without a
session announces nothing."""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any

import pytest
from redis.asyncio import Redis
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from weft_contracts import Topic
from weft_gateway.notices import register_notice_projector
from weft_gateway.streams import stream_key
from weft_knowledge.graph_extraction import ExtractionSettings, GraphExtractor
from weft_knowledge.progress_notices import ProgressNotices
from weft_knowledge.tenant_budget import TenantBudget
from weft_knowledge.wiki_generation import Completion, WikiGenerator
from weft_llm import Usage
from weft_platform.budgets import BudgetLimits, TokenBudgets
from weft_platform.credentials import RECORDS, load_signer
from weft_platform.record_credentials import record_scope
from weft_storage.knowledge.documents import DocumentReader
from weft_storage.knowledge.graph import GraphStore
from weft_storage.knowledge.ingest import queue_graph_extraction
from weft_storage.knowledge.models import Document
from weft_storage.knowledge.models_graph import GraphExtraction
from weft_storage.knowledge.store import KnowledgeStore
from weft_storage.knowledge.wiki import WikiPages
from weft_storage.knowledge.wiki_issues import WikiGenerations, queue_generation
from weft_testkit.credentials import credentials_dir
from weft_testkit.function_model import answer, queued

from tests.integration.kafka_helpers import service_runtime

pytestmark = pytest.mark.kafka

PAGES = {"pages": [{"slug": "probe", "title": "Probe", "content": "A probe."}]}
GRAPH = {"entities": [{"name": "Probe"}, {"name": "Mars"}],
         "relations": [{"source": "Probe", "relation": "orbits", "target": "Mars"}]}  # fmt: skip


class FlakyWriter:
    """Fails ``failures`` times, then answers one page (an in-process model double)."""

    def __init__(self, failures: int):
        self.failures = failures

    async def complete(self, system: str, user: str) -> Completion:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("model unreachable")
        return Completion(text=json.dumps(PAGES), input_tokens=10, output_tokens=5)


async def _document(
    sessions: async_sessionmaker[AsyncSession], tenant: str, kb: str, **origin: Any
) -> str:
    """A ready document of ``kb`` whose upload said ``origin`` (session, budgets), queued
    for its pages and graph as ingestion queues it."""
    doc, _ = await KnowledgeStore(sessions).add_document(tenant, kb, "Probe notes", "A probe.")
    async with sessions.begin() as s:
        if origin:
            await s.execute(update(Document).where(Document.id == doc).values(**origin))
        await queue_generation(s, doc)
        await queue_graph_extraction(s, doc)
    return doc


async def _progress(redis: Redis, key: str, count: int) -> list[dict[str, Any]]:
    """The first ``count`` knowledge_progress notices of the stream (waits for them)."""
    for _ in range(600):
        entries: Any = await redis.xrange(key)
        found = [json.loads(f[b"event"]) for _, f in entries if f[b"type"] == b"knowledge_progress"]
        if len(found) >= count:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"{count} notices expected in {key}, got {len(found)}")


async def test_wiki_and_graph_progress_reach_the_uploads_session_stream(
    engine: AsyncEngine, infra: dict[str, str]
) -> None:  # SPEC T-18, T-10
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    tenant, session = f"t-{secrets.token_hex(4)}", f"s-{secrets.token_hex(4)}"
    kb = await KnowledgeStore(sessions).create_knowledge_base(
        tenant, "probes", wiki_enabled=True, graph_enabled=True
    )
    # The upload carried the tenant's own budget: 1,000 tokens a day (the worker's
    # default is unlimited), of which it has used 1,000.
    doc = await _document(sessions, tenant, kb, session_id=session, budget_tokens_per_day=1000)
    signer = load_signer(credentials_dir(), "knowledge")
    reader = DocumentReader(sessions)
    async with service_runtime(infra, "knowledge-progress", check_credentials=True) as rt:
        register_notice_projector(rt.bus, rt.redis, max_len=100, retention_s=120)
        await rt.broker.start()
        notices = ProgressNotices(
            rt.bus, reader, lambda: signer.service(RECORDS, [record_scope(Topic.SESSION_NOTICES)])
        )
        budgets = TokenBudgets(rt.redis)
        budget = TenantBudget(budgets, BudgetLimits(), reader)
        generations = WikiGenerations(sessions)
        wiki = WikiGenerator(
            generations, WikiPages(sessions), reader, FlakyWriter(failures=1), None,
            retry_base_s=0.0, tenants=[tenant], notices=notices, budget=budget,
        )  # fmt: skip
        reply = answer(json.dumps(GRAPH), usage=Usage(prompt_tokens=30, completion_tokens=20))
        graph = GraphExtractor(
            GraphStore(sessions), queued([reply]), None,
            ExtractionSettings(model="m", tenants=(tenant,)), budget=budget, notices=notices,
        )  # fmt: skip

        assert await wiki.generate_next() and await wiki.generate_next()  # fails, then pages
        await budgets.spend(tenant, 1000)
        assert await graph.extract_next()  # over the upload's own budget: paused
        async with sessions.begin() as s:  # the window reset, and the tenant's limit rose
            await s.execute(update(Document).where(Document.id == doc)
                            .values(budget_tokens_per_day=10_000))  # fmt: skip
            await s.execute(update(GraphExtraction).where(GraphExtraction.document_id == doc)
                            .values(not_before=GraphExtraction.updated_at))  # fmt: skip
        assert await graph.extract_next()

        found = await _progress(rt.redis, stream_key(tenant, session), 4)
        states = [(n["data"]["stage"], n["data"]["state"]) for n in found]
        assert states == [("wiki", "retrying"), ("wiki", "done"), ("graph", "paused"),
                          ("graph", "done")]  # fmt: skip
        retrying, done, paused, extracted = (n["data"] for n in found)
        assert all(n["request_id"] == doc and n["tenant_id"] == tenant for n in found)
        assert retrying["reason"].startswith("ConnectionError")
        assert done["documents"]["done"] == 1 and done["totals"] == {"pages": 1}
        assert "tokens per day" in paused["reason"] and paused["resumes_at"]
        assert paused["documents"]["paused"] == 1
        assert extracted["totals"] == {"entities": 2, "relations": 1}
        assert not any("credential" in n for n in found)  # a client copy has none

        # A document uploaded without a session: its work is announced nowhere.
        quiet = await _document(sessions, tenant, kb)
        quiet_job = await generations.claim([tenant])
        assert quiet_job is not None and quiet_job.document_id == quiet
        assert not await notices.announce(quiet_job, "wiki", "done", _no_counts)
        assert (await budgets.used(tenant))["tokens_per_day"] == 1065  # 1000 + 15 + 50


async def _no_counts() -> tuple[dict[str, int], dict[str, int]]:
    raise AssertionError("a document without a session needs no counts")
