"""What agent-config asks knowledge about a tenant's knowledge bases: which exist and
what each can do (its KB guard, SPEC A-07, and the ``{{knowledge_bases}}`` placeholder),
and a few document titles for suggested starters (SPEC Q-01).

What each KB can do comes from :func:`weft_knowledge.capabilities.kb_capabilities`, fed
with the KB's switches and whether its documents have chunks and embeddings (read from
``documents``' counters: a few rows per KB, never its chunks).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import exists, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import KnowledgeTitle
from weft_storage.knowledge.models import Document, KnowledgeBase

from weft_knowledge.capabilities import KBFacts, kb_capabilities


class KnowledgeDirectory:
    """Reads a tenant's knowledge bases and titles (every query carries the tenant)."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, embeds: bool = True):
        """``embeds``: the service embeds what it ingests (its embedding model is set)."""
        self._sessions = sessions
        self._embeds = embeds

    async def views(self, s: AsyncSession, rows: Sequence[KnowledgeBase]) -> list[dict[str, Any]]:
        """``rows`` as the KB reads show them: id, name, description, switches and
        capabilities (one query for the chunk and embedding facts of all of them)."""
        ids = [r.id for r in rows]
        chunked = exists().where(
            Document.knowledge_base_id == KnowledgeBase.id, Document.chunk_count > 0
        )
        embedded = exists().where(
            Document.knowledge_base_id == KnowledgeBase.id, Document.embedded_count > 0
        )
        stmt = select(KnowledgeBase.id, chunked, embedded).where(KnowledgeBase.id.in_(ids))
        facts = {kb: (bool(c), bool(e)) for kb, c, e in (await s.execute(stmt)).all()}
        return [self._view(r, *facts.get(r.id, (False, False))) for r in rows]

    def _view(self, row: KnowledgeBase, has_chunks: bool, has_embeddings: bool) -> dict[str, Any]:
        facts = KBFacts(
            kind=row.kind,
            wiki_enabled=row.wiki_enabled,
            graph_enabled=row.graph_enabled,
            has_chunks=has_chunks,
            has_embeddings=has_embeddings,
            embeds=self._embeds,
        )
        return {
            "id": row.id,
            "name": row.name,
            "description": row.description or "",
            "kind": row.kind,
            "wiki_enabled": row.wiki_enabled,
            "graph_enabled": row.graph_enabled,
            "capabilities": kb_capabilities(facts),
        }

    async def listed(self, tenant_id: str) -> list[dict[str, Any]]:
        """Every KB of the tenant, oldest first, as :meth:`views` shows them."""
        stmt = (
            select(KnowledgeBase)
            .where(KnowledgeBase.tenant_id == tenant_id)
            .order_by(KnowledgeBase.created_at, KnowledgeBase.id)
        )
        async with self._sessions() as s:
            return await self.views(s, list(await s.scalars(stmt)))

    async def scoped(
        self, tenant_id: str, kb_ids: Sequence[str], limit: int = 100
    ) -> list[dict[str, Any]]:
        """The tenant's KBs among ``kb_ids`` in that order (its first ``limit`` KBs when
        empty), as :meth:`views` shows them; ids that
        are not the tenant's are left out (the route names them)."""
        stmt = (
            select(KnowledgeBase)
            .where(KnowledgeBase.tenant_id == tenant_id)
            .order_by(KnowledgeBase.created_at, KnowledgeBase.id)
        )
        chosen = stmt.where(KnowledgeBase.id.in_(list(kb_ids))) if kb_ids else stmt.limit(limit)
        async with self._sessions() as s:
            rows = {r.id: r for r in await s.scalars(chosen)}
            ordered = [rows[kb] for kb in kb_ids if kb in rows] if kb_ids else list(rows.values())
            return await self.views(s, ordered)

    async def titles(
        self, tenant_id: str, kb_ids: Sequence[str], limit: int
    ) -> list[KnowledgeTitle]:
        """The newest ready documents of ``kb_ids`` (every KB of the tenant when empty)."""
        stmt = (
            select(Document.id, Document.title, Document.knowledge_base_id)
            .where(Document.tenant_id == tenant_id, Document.status == "ready")
            .order_by(Document.created_at.desc(), Document.id)
            .limit(limit)
        )
        if kb_ids:
            stmt = stmt.where(Document.knowledge_base_id.in_(list(kb_ids)))
        async with self._sessions() as s:
            rows = (await s.execute(stmt)).all()
        return [
            KnowledgeTitle(
                title=r.title[:500], document_id=r.id, knowledge_base_id=r.knowledge_base_id
            )
            for r in rows
            if r.title.strip()
        ]
