"""Wiki generation and graph extraction are claimed fairly across tenants (issue 39: the
tenant's fair ingestion share), as documents are: the tenant with the fewest jobs running
goes first, so one tenant's backlog does not hold every worker while another tenant's
job waits behind it. Real PostgreSQL, a database of this module's own (a stack's worker
would claim these jobs)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_storage.knowledge.graph import GraphStore
from weft_storage.knowledge.ingest import queue_graph_extraction
from weft_storage.knowledge.store import KnowledgeStore
from weft_storage.knowledge.wiki_issues import WikiGenerations, queue_generation

Queue = Callable[[AsyncSession, str], Awaitable[None]]


@pytest.fixture(scope="module")
def migrated(own_database: str) -> str:
    return own_database


async def _backlog(
    sessions: async_sessionmaker[AsyncSession], tenant: str, docs: int, queue: Queue
) -> list[str]:
    store = KnowledgeStore(sessions)
    base = await store.create_knowledge_base(tenant, "kb", wiki_enabled=True, graph_enabled=True)
    queued = []
    for i in range(docs):
        doc, _ = await store.add_document(tenant, base, f"doc {i}", f"Text number {i}.")
        async with sessions.begin() as s:
            await queue(s, doc)
        queued.append(doc)
        await asyncio.sleep(0.01)  # due one after another: FIFO alone would take A's all
    return queued


async def _claim_wiki(sessions: async_sessionmaker[AsyncSession], tenants: list[str]) -> Any:
    return await WikiGenerations(sessions).claim(tenants)


async def _claim_graph(sessions: async_sessionmaker[AsyncSession], tenants: list[str]) -> Any:
    return await GraphStore(sessions).claim(tenants)


@pytest.mark.parametrize(
    ("queue", "claim"),
    [(queue_generation, _claim_wiki), (queue_graph_extraction, _claim_graph)],
    ids=["wiki", "graph"],
)
async def test_the_idle_tenants_job_goes_before_a_backlogs_next(
    sessions: async_sessionmaker[AsyncSession], queue: Queue, claim: Any
) -> None:
    busy, idle = f"a-{secrets.token_hex(3)}", f"b-{secrets.token_hex(3)}"
    a_docs = await _backlog(sessions, busy, 3, queue)
    [b_doc] = await _backlog(sessions, idle, 1, queue)
    first = await claim(sessions, [busy, idle])
    second = await claim(sessions, [busy, idle])
    assert first is not None and second is not None
    assert first.document_id == a_docs[0]  # due first, nobody running
    assert second.document_id == b_doc  # not A's second: A already has one running
