"""What agent-config asks knowledge about a tenant's knowledge bases: which exist and
what each can do (its KB guard, SPEC A-07, and the ``{{knowledge_bases}}`` placeholder),
and a few document titles for suggested starters (SPEC Q-01).

Every Weft knowledge base today is a document KB whose chunks are both embedded and
keyword-indexed at ingestion, so each offers ``vector`` and ``keyword``; wiki, graph and
FAQ knowledge bases do not exist yet. :func:`capabilities_of` is the one place that will
read a KB's type when they do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import KnowledgeTitle
from weft_storage.knowledge.models import Document, KnowledgeBase

DOCUMENT_KB = ("keyword", "vector")
"""Capabilities (``weft_tool_catalog.capabilities.KBCapability`` values) of a document KB."""


def capabilities_of(row: KnowledgeBase) -> list[str]:
    """What a knowledge base offers (every KB is a document KB today, see module doc);
    ``wiki`` when its wiki is enabled (until the one derivation of issue 39 replaces this)."""
    return [*DOCUMENT_KB, "wiki"] if row.wiki_enabled else list(DOCUMENT_KB)


class KnowledgeDirectory:
    """Reads a tenant's knowledge bases and titles (every query carries the tenant)."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self._sessions = sessions

    async def scoped(
        self, tenant_id: str, kb_ids: Sequence[str], limit: int = 100
    ) -> list[dict[str, Any]]:
        """The tenant's KBs among ``kb_ids`` in that order (its first ``limit`` KBs when
        empty), each with ``id``, ``name``, ``description`` and ``capabilities``; ids that
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
        return [
            {
                "id": r.id,
                "name": r.name,
                "description": r.description or "",
                "capabilities": capabilities_of(r),
            }
            for r in ordered
        ]

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
