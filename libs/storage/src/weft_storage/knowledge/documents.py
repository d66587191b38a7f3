"""Reading documents of knowledge bases: listing (T-09), pages of chunks in reading order,
chunks with neighbours (T-08), original files (T-12), and the embeddings semantic search
ranks (T-07). Every read is scoped to one tenant and, when given, to its KB ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts.knowledge import ChunkRow, DocumentInfo

from weft_storage.knowledge.models import Chunk, Document
from weft_storage.knowledge.models_files import DocumentFile
from weft_storage.knowledge.store import ChunkHit


@dataclass(frozen=True, kw_only=True)
class ScopeStats:
    """Per knowledge base: chunks and how many of them have embeddings."""

    knowledge_base_id: str
    chunks: int
    embedded: int


@dataclass(frozen=True, kw_only=True)
class DocumentOrigin:
    """What the upload of a document said about its later work (wiki pages, graph)."""

    session_id: str | None
    """The session its progress notices go to (None: the upload named none)."""
    tokens_per_minute: int | None
    """The tenant's budgets the gateway admitted the upload under (None: not given, the
    worker's defaults apply; 0: unlimited)."""
    tokens_per_day: int | None


def _info(d: Document) -> DocumentInfo:
    return DocumentInfo(
        id=d.id,
        knowledge_base_id=d.knowledge_base_id,
        title=d.title,
        file_name=d.file_name,
        status=d.status,
        chunk_count=d.chunk_count,
        embedded_count=d.embedded_count,
        error=d.error,
        tags=tuple(d.tags or ()),
    )


class DocumentReader:
    """Read side of documents and chunks."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self._sessions = sessions

    @staticmethod
    def _scoped(stmt: Any, model: Any, tenant_id: str, kb_ids: list[str]) -> Any:
        stmt = stmt.where(model.tenant_id == tenant_id)
        return stmt.where(model.knowledge_base_id.in_(kb_ids)) if kb_ids else stmt

    async def list_documents(
        self, tenant_id: str, kb_ids: list[str], *, keyword: str = "", page: int = 1,
        size: int = 20, document_ids: Sequence[str] | None = None,
    ) -> tuple[int, list[DocumentInfo]]:  # fmt: skip
        """(total in scope, one page of documents), newest first; keyword on title/file
        name; only ``document_ids`` when given (SPEC A-11: a mention's documents, applied
        before the page is cut, so the total counts them alone)."""
        base = self._scoped(select(Document), Document, tenant_id, kb_ids)
        if document_ids is not None:
            base = base.where(Document.id.in_(list(document_ids)))
        if keyword:
            escaped = keyword.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            like = f"%{escaped}%"
            base = base.where(or_(Document.title.ilike(like), Document.file_name.ilike(like)))
        count = select(func.count()).select_from(base.subquery())
        rows = base.order_by(Document.created_at.desc(), Document.id.desc())
        async with self._sessions() as s:
            total = int(await s.scalar(count) or 0)
            docs = (await s.scalars(rows.offset((page - 1) * size).limit(size))).all()
        return total, [_info(d) for d in docs]

    async def document(self, tenant_id: str, kb_ids: list[str], doc_id: str) -> DocumentInfo | None:
        """The document if it is in scope."""
        stmt = self._scoped(select(Document), Document, tenant_id, kb_ids).where(
            Document.id == doc_id
        )
        async with self._sessions() as s:
            doc = await s.scalar(stmt)
        return _info(doc) if doc else None

    async def origin(self, tenant_id: str, doc_id: str) -> DocumentOrigin | None:
        """The session and budgets the document's upload named; None when it is gone."""
        stmt = select(
            Document.session_id, Document.budget_tokens_per_minute, Document.budget_tokens_per_day
        ).where(Document.tenant_id == tenant_id, Document.id == doc_id)
        async with self._sessions() as s:
            row = (await s.execute(stmt)).first()
        if row is None:
            return None
        return DocumentOrigin(session_id=row[0], tokens_per_minute=row[1], tokens_per_day=row[2])

    async def knowledge_base_of(self, tenant_id: str, doc_id: str) -> str | None:
        """The knowledge base holding document ``doc_id`` of the tenant, None when the
        tenant has no such document (scope checks of routes addressed by document id)."""
        stmt = select(Document.knowledge_base_id).where(
            Document.tenant_id == tenant_id, Document.id == doc_id
        )
        async with self._sessions() as s:
            kb_id: str | None = await s.scalar(stmt)
        return kb_id

    async def chunks(
        self, tenant_id: str, doc_id: str, *, start: int = 0, limit: int | None = None
    ) -> list[ChunkRow]:
        """Chunks of a document in reading order from position ``start``."""
        stmt = (
            select(Chunk.id, Chunk.position, Chunk.content)
            .where(
                Chunk.tenant_id == tenant_id, Chunk.document_id == doc_id, Chunk.position >= start
            )
            .order_by(Chunk.position)
        )
        if limit is not None:
            stmt = stmt.limit(limit)
        async with self._sessions() as s:
            rows = (await s.execute(stmt)).all()
        return [ChunkRow(id=r.id, position=r.position, content=r.content) for r in rows]

    async def chunk(self, tenant_id: str, kb_ids: list[str], chunk_id: str) -> ChunkHit | None:
        """One chunk, in scope."""
        hits = await self.chunks_by_ids(tenant_id, kb_ids, [chunk_id])
        return hits[0] if hits else None

    async def chunks_by_ids(
        self, tenant_id: str, kb_ids: list[str], chunk_ids: list[str]
    ) -> list[ChunkHit]:
        """Chunks with their document titles, in the order of ``chunk_ids``."""
        if not chunk_ids:
            return []
        # Named columns, not the entity: the embedding and tsvector are not needed here.
        columns = (Chunk.id, Chunk.document_id, Chunk.knowledge_base_id, Chunk.content)
        stmt = self._scoped(
            select(*columns, Chunk.position, Document.title).join(
                Document, Document.id == Chunk.document_id
            ),
            Chunk,
            tenant_id,
            kb_ids,
        ).where(Chunk.id.in_(chunk_ids))
        async with self._sessions() as s:
            rows = (await s.execute(stmt)).all()
        by_id = {
            r.id: ChunkHit(
                chunk_id=r.id,
                document_id=r.document_id,
                knowledge_base_id=r.knowledge_base_id,
                title=r.title,
                content=r.content,
                score=0.0,
                position=r.position,
            )
            for r in rows
        }
        return [by_id[i] for i in chunk_ids if i in by_id]

    async def scope_stats(self, tenant_id: str, kb_ids: list[str]) -> list[ScopeStats]:
        """Chunk and embedding counts per knowledge base in scope.

        Summed from the documents' counters, which ingestion updates in the transactions
        that write the chunks: one row per document instead of a scan of every chunk on
        each search.
        """
        stmt = self._scoped(
            select(
                Document.knowledge_base_id,
                func.sum(Document.chunk_count),
                func.sum(Document.embedded_count),
            ),
            Document,
            tenant_id,
            kb_ids,
        ).group_by(Document.knowledge_base_id)
        async with self._sessions() as s:
            rows = (await s.execute(stmt)).all()
        return [
            ScopeStats(knowledge_base_id=k, chunks=int(n or 0), embedded=int(e or 0))
            for k, n, e in rows
        ]

    async def embedding_version(self, tenant_id: str, kb_id: str) -> tuple[int, str]:
        """(embedded chunk count, newest document change): changes whenever the KB's vectors do.

        Every write of chunks or embeddings bumps its document's ``updated_at``; a deleted
        document changes the document count.
        """
        stmt = select(
            func.sum(Document.embedded_count), func.max(Document.updated_at), func.count()
        ).where(Document.tenant_id == tenant_id, Document.knowledge_base_id == kb_id)
        async with self._sessions() as s:
            embedded, newest, documents = (await s.execute(stmt)).one()
        stamp = newest.isoformat() if newest is not None else ""
        return int(embedded or 0), f"{stamp}/{documents}"

    async def document_embeddings(
        self, tenant_id: str, kb_ids: list[str], doc_ids: list[str]
    ) -> tuple[list[str], list[list[float]]]:
        """Ids and vectors of the embedded chunks of ``doc_ids`` in scope (a mention's
        targets: a few documents, ranked without the per-KB matrix)."""
        stmt = self._scoped(select(Chunk.id, Chunk.embedding), Chunk, tenant_id, kb_ids).where(
            Chunk.document_id.in_(doc_ids), Chunk.embedding.is_not(None)
        )
        async with self._sessions() as s:
            rows = (await s.execute(stmt)).all()
        return [r[0] for r in rows], [list(r[1] or []) for r in rows]

    async def embeddings(self, tenant_id: str, kb_id: str) -> tuple[list[str], list[list[float]]]:
        """Ids and vectors of a knowledge base's embedded chunks."""
        stmt = select(Chunk.id, Chunk.embedding).where(
            Chunk.tenant_id == tenant_id,
            Chunk.knowledge_base_id == kb_id,
            Chunk.embedding.is_not(None),
        )
        async with self._sessions() as s:
            rows = (await s.execute(stmt)).all()
        return [r[0] for r in rows], [list(r[1] or []) for r in rows]

    async def file(self, tenant_id: str, doc_id: str) -> tuple[str, bytes] | None:
        """(file name, bytes) of an uploaded document of the tenant."""
        stmt = select(DocumentFile.file_name, DocumentFile.content).where(
            DocumentFile.tenant_id == tenant_id, DocumentFile.document_id == doc_id
        )
        async with self._sessions() as s:
            row = (await s.execute(stmt)).first()
        return (row[0], row[1]) if row else None
