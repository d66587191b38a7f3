"""Knowledge bases in PostgreSQL: ingest text into overlapping chunks, search by keywords.

Keyword search uses PostgreSQL full text (stored ``tsvector`` column + GIN index): chunks
holding every word of the query first, then, if too few, chunks holding any of its words
so that a natural sentence still matches; ``ts_rank_cd`` orders the hits of each pass over
a bounded number of index matches. Semantic and hybrid search live in ``weft_tools``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from ulid import ULID

from weft_storage.knowledge.models import Chunk, Document, KnowledgeBase

_WORD = re.compile(r"[A-Za-z0-9]{2,}")
MAX_TARGETS = 500
"""Most documents a turn's mentions narrow a search to."""
KEYWORD_CANDIDATES = 1000
"""Index matches ranked at most per keyword pass (bounds the cost of common words)."""


@dataclass(frozen=True, kw_only=True)
class ChunkHit:
    """One search result."""

    chunk_id: str
    document_id: str
    knowledge_base_id: str
    title: str
    content: str
    score: float
    position: int = 0


def split_into_chunks(text: str, size: int = 500, overlap: int = 80) -> list[str]:
    """Cut ``text`` into chunks of about ``size`` characters, each sharing ``overlap``
    characters with the previous one; cuts fall on paragraph or sentence ends when possible.
    """
    if size <= overlap:
        raise ValueError("chunk size must exceed the overlap")
    text = text.strip()
    chunks: list[str] = []
    start = 0
    while start < len(text):
        end = min(len(text), start + size)
        if end < len(text):
            end = _natural_cut(text, start, end)
        chunks.append(text[start:end].strip())
        if end >= len(text):
            break
        start = max(end - overlap, start + 1)
    return [c for c in chunks if c]


def _natural_cut(text: str, start: int, end: int) -> int:
    window = text[start:end]
    for sep in ("\n\n", ". ", "\n"):
        pos = window.rfind(sep)
        if pos > len(window) // 2:
            return start + pos + len(sep)
    return end


def keyword_tsquery(query: str) -> str:
    """An OR ``to_tsquery`` expression of the query's words (safe: letters and digits only).

    The broad pass of :meth:`KnowledgeStore.keyword_search`.
    """
    words = sorted({w.lower() for w in _WORD.findall(query)})
    return " | ".join(words)


class KnowledgeStore:
    """Reads and writes knowledge bases; every call is scoped to one tenant (invariant 5)."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self._sessions = sessions

    @property
    def sessions(self) -> async_sessionmaker[AsyncSession]:
        """The session factory (other stores of knowledge's tables share it)."""
        return self._sessions

    async def create_knowledge_base(
        self,
        tenant_id: str,
        name: str,
        description: str = "",
        *,
        kind: str = "documents",
        graph_enabled: bool = False,
        wiki_enabled: bool = False,
    ) -> str:
        """Create a knowledge base of ``kind`` ('documents' or 'faq') and return its id
        (``graph_enabled``: its documents' entities and relations are extracted at
        ingestion, SPEC T-10; ``wiki_enabled``: pages are generated from them, SPEC T-18)."""
        kb_id = f"kb_{ULID()}"
        async with self._sessions.begin() as s:
            s.add(
                KnowledgeBase(
                    id=kb_id, tenant_id=tenant_id, name=name, description=description,
                    kind=kind, graph_enabled=graph_enabled, wiki_enabled=wiki_enabled,
                )
            )  # fmt: skip
        return kb_id

    async def list_knowledge_bases(self, tenant_id: str) -> list[dict[str, Any]]:
        """The tenant's knowledge bases, oldest first."""
        stmt = (
            select(KnowledgeBase)
            .where(KnowledgeBase.tenant_id == tenant_id)
            .order_by(KnowledgeBase.created_at, KnowledgeBase.id)
        )
        async with self._sessions() as s:
            rows = (await s.scalars(stmt)).all()
        return [
            {
                "id": r.id,
                "name": r.name,
                "description": r.description,
                "kind": r.kind,
                "wiki_enabled": r.wiki_enabled,
            }
            for r in rows
        ]

    async def knowledge_base_kind(self, tenant_id: str, kb_id: str) -> str | None:
        """What ``kb_id`` of this tenant holds ('documents' or 'faq'); None: no such KB."""
        async with self._sessions() as s:
            kind: str | None = await s.scalar(
                select(KnowledgeBase.kind).where(
                    KnowledgeBase.id == kb_id, KnowledgeBase.tenant_id == tenant_id
                )
            )
        return kind

    async def set_document_tags(
        self, tenant_id: str, kb_ids: list[str], doc_id: str, tags: list[str]
    ) -> bool:
        """Replace the tags of a document in scope (``kb_ids`` empty: any of the tenant's);
        False when there is none."""
        stmt = update(Document).where(Document.tenant_id == tenant_id, Document.id == doc_id)
        if kb_ids:
            stmt = stmt.where(Document.knowledge_base_id.in_(kb_ids))
        async with self._sessions.begin() as s:
            result = await s.execute(stmt.values(tags=tags))
        return bool(getattr(result, "rowcount", 0))

    async def search_targets(
        self, tenant_id: str, kb_ids: list[str], doc_ids: list[str], tags: list[str]
    ) -> list[tuple[str, str]]:
        """(knowledge base, document) of the documents in scope that are named in
        ``doc_ids`` or carry one of ``tags`` (SPEC A-11's @doc and @tag mentions)."""
        if not doc_ids and not tags:
            return []
        named = Document.id.in_(doc_ids) if doc_ids else None
        tagged = Document.tags.overlap(tags) if tags else None
        matches = [m for m in (named, tagged) if m is not None]
        stmt = select(Document.knowledge_base_id, Document.id).where(
            Document.tenant_id == tenant_id,
            matches[0] if len(matches) == 1 else matches[0] | matches[1],
        )
        if kb_ids:
            stmt = stmt.where(Document.knowledge_base_id.in_(kb_ids))
        async with self._sessions() as s:
            rows = (await s.execute(stmt.order_by(Document.id).limit(MAX_TARGETS))).all()
        return [(r[0], r[1]) for r in rows]

    async def knowledge_base_exists(self, tenant_id: str, kb_id: str) -> bool:
        """Whether ``kb_id`` exists for this tenant."""
        async with self._sessions() as s:
            found = await s.scalar(
                select(KnowledgeBase.id).where(
                    KnowledgeBase.id == kb_id, KnowledgeBase.tenant_id == tenant_id
                )
            )
        return found is not None

    async def add_document(
        self,
        tenant_id: str,
        kb_id: str,
        title: str,
        text: str,
        file_name: str = "",
    ) -> tuple[str, int]:
        """Store a document and its chunks at once, without the ingestion queue (seed data
        of tests and benchmarks; not metered); return (document id, chunk count)."""
        doc_id = f"doc_{ULID()}"
        pieces = split_into_chunks(text)
        async with self._sessions.begin() as s:
            s.add(
                Document(
                    id=doc_id,
                    tenant_id=tenant_id,
                    knowledge_base_id=kb_id,
                    title=title,
                    file_name=file_name,
                    chunk_count=len(pieces),
                    size_bytes=len(text.encode()),
                )
            )
            await s.flush()
            s.add_all(
                Chunk(
                    id=f"chk_{ULID()}",
                    tenant_id=tenant_id,
                    knowledge_base_id=kb_id,
                    document_id=doc_id,
                    position=i,
                    content=piece,
                )
                for i, piece in enumerate(pieces)
            )
        return doc_id, len(pieces)

    async def keyword_search(
        self,
        tenant_id: str,
        kb_ids: list[str],
        query: str,
        limit: int = 5,
        *,
        document_ids: Sequence[str] = (),
    ) -> list[ChunkHit]:
        """Best chunks for ``query`` in the tenant's ``kb_ids`` (all its KBs when empty).

        Two passes, each ranking at most :data:`KEYWORD_CANDIDATES` matches of the GIN
        index: first the chunks holding every word (``websearch_to_tsquery``: quoted
        phrases, ``or`` and ``-word`` work as a search box does); when fewer than
        ``limit`` do, chunks holding any word fill the rest, ranked after them.
        ``document_ids`` (a mention's targets), when given, bounds the search to them.
        """
        words = keyword_tsquery(query)
        if not words:
            return []
        precise = func.websearch_to_tsquery("english", query)
        docs = document_ids
        hits = await self._ranked(
            ranked_matches(tenant_id, kb_ids, precise, limit, document_ids=docs)
        )
        if len(hits) < limit and " | " in words:
            broad = func.to_tsquery("english", words)
            found = [h.chunk_id for h in hits]
            stmt = ranked_matches(
                tenant_id, kb_ids, broad, limit - len(hits), exclude=found, document_ids=docs
            )
            hits += await self._ranked(stmt)
        return hits

    async def _ranked(self, stmt: Select[Any]) -> list[ChunkHit]:
        async with self._sessions() as s:
            rows = (await s.execute(stmt)).all()
        return [
            ChunkHit(
                chunk_id=r.id,
                document_id=r.document_id,
                knowledge_base_id=r.knowledge_base_id,
                title=r.title,
                content=r.content,
                score=float(r.score),
                position=r.position,
            )
            for r in rows
        ]


def ranked_matches(
    tenant_id: str,
    kb_ids: list[str],
    tsq: ColumnElement[Any],
    limit: int,
    *,
    exclude: Sequence[str] = (),
    document_ids: Sequence[str] = (),
) -> Select[Any]:
    """One keyword pass: rank at most KEYWORD_CANDIDATES index matches of ``tsq``, keep
    the top ``limit`` (public so that the benchmark can EXPLAIN the real statement)."""
    score = func.ts_rank_cd(Chunk.tsv, tsq).label("score")
    columns = (Chunk.id, Chunk.document_id, Chunk.knowledge_base_id, Chunk.content)
    matched = select(*columns, Chunk.position, score).where(
        Chunk.tenant_id == tenant_id, Chunk.tsv.op("@@")(tsq)
    )
    if kb_ids:
        matched = matched.where(Chunk.knowledge_base_id.in_(kb_ids))
    if exclude:
        matched = matched.where(Chunk.id.not_in(exclude))
    if document_ids:
        matched = matched.where(Chunk.document_id.in_(document_ids))
    # The LIMIT bounds the ranking work: a word shared by most chunks no longer makes
    # PostgreSQL rank the whole knowledge base.
    top = matched.limit(KEYWORD_CANDIDATES).subquery()
    return (
        select(top, Document.title)
        .join(Document, Document.id == top.c.document_id)
        .order_by(top.c.score.desc(), top.c.id)
        .limit(limit)
    )
