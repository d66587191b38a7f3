"""A knowledge base's wiki and graph switched after its creation, on the real PostgreSQL
(SPEC T-18, T-10): switched on, the ready documents it already holds are queued once (a
backfill, with the budgets the switch came with); switched off, their queued work is no
longer claimed, and switched on again it resumes where it was."""

from __future__ import annotations

import asyncio
import secrets

from sqlalchemy import select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from weft_storage.knowledge.documents import DocumentOrigin, DocumentReader
from weft_storage.knowledge.graph import GraphStore
from weft_storage.knowledge.ingest import IngestionQueue
from weft_storage.knowledge.models import Document, KnowledgeBase
from weft_storage.knowledge.models_wiki import WikiGeneration
from weft_storage.knowledge.store import KnowledgeStore
from weft_storage.knowledge.switches import KnowledgeSwitches, _backfill
from weft_storage.knowledge.wiki_issues import WikiGenerations


async def _kb_with_documents(
    sessions: async_sessionmaker[AsyncSession], tenant: str, ready: int
) -> tuple[str, list[str]]:
    store = KnowledgeStore(sessions)
    kb = await store.create_knowledge_base(tenant, "notes")
    docs = [(await store.add_document(tenant, kb, f"Note {i}", f"Note {i}."))[0]
            for i in range(ready)]  # fmt: skip
    async with sessions.begin() as s:  # one more, still in ingestion: not backfilled
        s.add(Document(id=f"doc_{secrets.token_hex(6)}", tenant_id=tenant, knowledge_base_id=kb,
                       title="Pending", status="pending"))  # fmt: skip
    return kb, docs


async def test_switching_on_backfills_once_and_off_stops_the_claims(engine: AsyncEngine) -> None:
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    tenant = f"t-{secrets.token_hex(4)}"
    kb, docs = await _kb_with_documents(sessions, tenant, ready=2)
    switches, generations = KnowledgeSwitches(sessions), WikiGenerations(sessions)
    origin = DocumentOrigin(session_id=None, tokens_per_minute=0, tokens_per_day=777)

    changed = await switches.change(tenant, kb, wiki=True, graph=True, origin=origin)
    assert changed is not None and changed.wiki_enabled and changed.graph_enabled
    assert (changed.wiki_backfilled, changed.graph_backfilled) == (2, 2)
    assert (await DocumentReader(sessions).origin(tenant, docs[0])) == DocumentOrigin(
        session_id=None, tokens_per_minute=0, tokens_per_day=777
    )
    again = await switches.change(tenant, kb, wiki=True, graph=True, origin=origin)
    assert again is not None and (again.wiki_backfilled, again.graph_backfilled) == (0, 0)

    off = await switches.change(tenant, kb, wiki=False, graph=False)
    assert off is not None and not off.wiki_enabled and not off.graph_enabled
    assert await generations.claim([tenant]) is None
    assert await GraphStore(sessions).claim([tenant]) is None

    on = await switches.change(tenant, kb, wiki=True)  # the graph stays off
    assert on is not None and on.wiki_backfilled == 0  # its queue was kept: it resumes
    job = await generations.claim([tenant])
    assert job is not None and job.document_id in docs
    assert await GraphStore(sessions).claim([tenant]) is None
    async with sessions() as s:
        queued = set(await s.scalars(select(WikiGeneration.document_id)
                                     .where(WikiGeneration.knowledge_base_id == kb)))  # fmt: skip
    assert queued == set(docs)


async def test_another_tenants_kb_is_not_switched(engine: AsyncEngine) -> None:
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    kb, _ = await _kb_with_documents(sessions, f"t-{secrets.token_hex(4)}", ready=1)
    assert await KnowledgeSwitches(sessions).change("attacker", kb, wiki=True) is None
    assert await WikiGenerations(sessions).progress("attacker", kb) == {
        "documents": dict.fromkeys(("pending", "paused", "generating", "done", "failed"), 0),
        "pages": 0, "last_error": None,
    }  # fmt: skip


async def test_a_document_turning_ready_during_the_switch_is_queued_once(
    engine: AsyncEngine,
) -> None:
    """The switch's backfill runs before the document is ready, the document's own
    queueing while the switch is not committed yet: the shared KB row lock makes the
    latter wait for the switch and see the wiki on, so the document is not missed."""
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    tenant = f"t-{secrets.token_hex(4)}"
    kb = await KnowledgeStore(sessions).create_knowledge_base(tenant, "race")
    doc = await IngestionQueue(sessions).enqueue_file(
        tenant, kb, title="late", file_name="late.md", content=b"# late"
    )
    async with sessions.begin() as s:
        await s.execute(update(Document).where(Document.id == doc).values(status="processing"))

    async with sessions.begin() as switch:  # what KnowledgeSwitches.change does, held open
        await switch.execute(select(KnowledgeBase).where(KnowledgeBase.id == kb).with_for_update())
        await switch.execute(
            update(KnowledgeBase).where(KnowledgeBase.id == kb).values(wiki_enabled=True)
        )
        assert await _backfill(switch, WikiGeneration, tenant, kb) == 0  # not ready yet
        finishing = asyncio.create_task(IngestionQueue(sessions).finish(doc))
        await _waiting_or_done(sessions, finishing)
    await asyncio.wait_for(finishing, 30)
    async with sessions() as s:
        queued = list(await s.scalars(
            select(WikiGeneration.document_id).where(WikiGeneration.knowledge_base_id == kb)
        ))  # fmt: skip
    assert queued == [doc]


async def _waiting_or_done(
    sessions: async_sessionmaker[AsyncSession], task: asyncio.Task[None]
) -> None:
    """Until ``task`` waits for a row lock (it reached the KB row) or is done (it took
    none): polled, never a fixed sleep."""
    waiting = text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE wait_event_type = 'Lock' AND datname = current_database()"
    )
    async with asyncio.timeout(30):
        while not task.done():
            async with sessions() as s:
                if await s.scalar(waiting):
                    return
            await asyncio.sleep(0.02)
