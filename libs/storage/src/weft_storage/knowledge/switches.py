"""A knowledge base's wiki and graph switches changed after its creation (SPEC T-18, T-10).

Switching one on queues the work for the documents the KB already holds (a backfill): a
``ready`` document without a wiki generation (or graph extraction) row gets one, in the
transaction that flips the switch, so no ready document of a wiki (graph) KB is left
without its work, as at ingestion. A document with a row keeps it: what was generated
before the switch went off stays, and what was pending resumes. Switching one off stops
the work: the queues' claims take only documents of KBs whose switch is on
(``WikiGenerations.claim``, ``GraphStore.claim``); pages and entities already made stay
readable through the API, and the KB no longer offers the capability, so its tools are
not given to agents.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, literal, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from weft_storage.knowledge.documents import DocumentOrigin
from weft_storage.knowledge.ingest import notify_workers
from weft_storage.knowledge.models import Document, KnowledgeBase
from weft_storage.knowledge.models_graph import GraphExtraction
from weft_storage.knowledge.models_wiki import WikiGeneration


@dataclass(frozen=True, kw_only=True)
class SwitchChange:
    """What a change of switches did."""

    wiki_enabled: bool
    graph_enabled: bool
    wiki_backfilled: int
    """Documents queued for their wiki pages by this change."""
    graph_backfilled: int
    """Documents queued for their graph extraction by this change."""


class KnowledgeSwitches:
    """Changes the ``wiki_enabled`` and ``graph_enabled`` of one tenant's KB."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self._sessions = sessions

    async def change(
        self,
        tenant_id: str,
        kb_id: str,
        *,
        wiki: bool | None = None,
        graph: bool | None = None,
        origin: DocumentOrigin | None = None,
    ) -> SwitchChange | None:
        """Set the switches given (None: unchanged) and backfill what was switched on;
        ``origin``: the budgets the backfilled documents' work runs under (the caller's
        newest; its session is not used). None when the KB is not the tenant's."""
        async with self._sessions.begin() as s:
            kb = await s.scalar(
                select(KnowledgeBase)
                .where(KnowledgeBase.id == kb_id, KnowledgeBase.tenant_id == tenant_id)
                .with_for_update()
            )
            if kb is None:
                return None
            wiki_on = wiki is True and not kb.wiki_enabled
            graph_on = graph is True and not kb.graph_enabled
            if wiki is not None:
                kb.wiki_enabled = wiki
            if graph is not None:
                kb.graph_enabled = graph
            await s.flush()
            if (wiki_on or graph_on) and origin is not None:
                await _set_budgets(s, tenant_id, kb_id, origin)
            wiki_n = await _backfill(s, WikiGeneration, tenant_id, kb_id) if wiki_on else 0
            graph_n = await _backfill(s, GraphExtraction, tenant_id, kb_id) if graph_on else 0
            if graph_n:
                await notify_workers(s)
            return SwitchChange(
                wiki_enabled=kb.wiki_enabled, graph_enabled=kb.graph_enabled,
                wiki_backfilled=wiki_n, graph_backfilled=graph_n,
            )  # fmt: skip


async def _backfill(
    s: AsyncSession, queue: type[WikiGeneration] | type[GraphExtraction], tenant_id: str, kb_id: str
) -> int:
    """Queue every ready document of the KB that has no row in ``queue``; how many."""
    has_row = select(queue.document_id).where(queue.document_id == Document.id).exists()
    source = select(
        Document.id, Document.tenant_id, Document.knowledge_base_id, literal("pending"),
        literal(0), func.now(),
    ).where(
        Document.tenant_id == tenant_id, Document.knowledge_base_id == kb_id,
        Document.status == "ready", ~has_row,
    )  # fmt: skip
    due = "next_attempt_at" if queue is WikiGeneration else "not_before"
    columns = ["document_id", "tenant_id", "knowledge_base_id", "status", "attempts", due]
    stmt = insert(queue).from_select(columns, source).on_conflict_do_nothing()
    result = await s.execute(stmt.returning(queue.document_id))
    return len(result.all())


async def _set_budgets(s: AsyncSession, tenant_id: str, kb_id: str, origin: DocumentOrigin) -> None:
    await s.execute(
        update(Document)
        .where(Document.tenant_id == tenant_id, Document.knowledge_base_id == kb_id)
        .values(
            budget_tokens_per_minute=origin.tokens_per_minute,
            budget_tokens_per_day=origin.tokens_per_day,
        )
    )
