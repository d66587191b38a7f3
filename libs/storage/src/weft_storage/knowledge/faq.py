"""Entries of FAQ knowledge bases (SPEC C-04): a question, its other phrasings, an answer.

Every read and write names the tenant, and the knowledge base(s) it may reach: an entry
outside them is the ``None`` / ``False`` of a missing one. Keyword search ranks the
entries' full-text vector (question and phrasings weigh more than the answer) over a
bounded number of index matches, as chunks are ranked (``store.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from ulid import ULID

from weft_storage.knowledge.faq_jobs import FaqEmbeddingQueue, queue_embedding_job
from weft_storage.knowledge.models import FaqEntry, KnowledgeBase
from weft_storage.knowledge.store import KEYWORD_CANDIDATES, keyword_tsquery

FAQ_KIND = "faq"
DOCUMENTS_KIND = "documents"


@dataclass(frozen=True, kw_only=True)
class FaqDraft:
    """An entry to write: its question, other phrasings, answer and optional tag."""

    question: str
    answer: str
    similar_questions: tuple[str, ...] = ()
    tag: str = ""


@dataclass(frozen=True, kw_only=True)
class FaqRow:
    """A stored entry as the API shows it."""

    id: str
    knowledge_base_id: str
    question: str
    similar_questions: list[str]
    answer: str
    tag: str


@dataclass(frozen=True, kw_only=True)
class FaqHit:
    """An entry found by a search, with its keyword rank or cosine similarity."""

    entry: FaqRow
    score: float


def _row(e: Any) -> FaqRow:
    similar = [q for q in (e.similar_text or "").split("\n") if q]
    return FaqRow(
        id=e.id,
        knowledge_base_id=e.knowledge_base_id,
        question=e.question,
        similar_questions=similar,
        answer=e.answer,
        tag=e.tag,
    )


_COLUMNS = (
    FaqEntry.id,
    FaqEntry.knowledge_base_id,
    FaqEntry.question,
    FaqEntry.similar_text,
    FaqEntry.answer,
    FaqEntry.tag,
)


class FaqStore:
    """Reads and writes FAQ entries; every call is scoped to one tenant (invariant 5)."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self._sessions = sessions

    async def add(
        self,
        tenant_id: str,
        kb_id: str,
        drafts: list[FaqDraft],
        embeddings: list[list[float]] | None = None,
    ) -> list[str]:
        """Store ``drafts`` (with their question embeddings when given) in one
        transaction; their ids, in order."""
        ids = [f"faq_{ULID()}" for _ in drafts]
        vectors: list[list[float] | None] = (
            list(embeddings) if embeddings is not None else [None] * len(drafts)
        )
        async with self._sessions.begin() as s:
            s.add_all(
                FaqEntry(
                    id=entry_id,
                    tenant_id=tenant_id,
                    knowledge_base_id=kb_id,
                    question=d.question,
                    similar_text="\n".join(d.similar_questions),
                    answer=d.answer,
                    tag=d.tag,
                    embedding=vector,
                )
                for entry_id, d, vector in zip(ids, drafts, vectors, strict=True)
            )
        return ids

    async def add_queued(
        self, tenant_id: str, kb_id: str, drafts: list[FaqDraft], *, user_id: str = ""
    ) -> tuple[list[str], str]:
        """Store ``drafts`` without embeddings and queue the job that owes them, in one
        transaction (the ingestion workers embed them); (their ids in order, the job)."""
        ids = [f"faq_{ULID()}" for _ in drafts]
        async with self._sessions.begin() as s:
            s.add_all(
                FaqEntry(
                    id=entry_id, tenant_id=tenant_id, knowledge_base_id=kb_id,
                    question=d.question, similar_text="\n".join(d.similar_questions),
                    answer=d.answer, tag=d.tag,
                )
                for entry_id, d in zip(ids, drafts, strict=True)
            )  # fmt: skip
            await s.flush()
            job_id = await queue_embedding_job(s, tenant_id, kb_id, user_id, ids)
        return ids, job_id

    async def embedding_progress(self, tenant_id: str, kb_id: str) -> dict[str, object]:
        """The base's entries, those embedded, and its embedding jobs by state."""
        return await FaqEmbeddingQueue(self._sessions).progress(tenant_id, kb_id)

    async def count(self, tenant_id: str, kb_id: str) -> int:
        """Entries of one knowledge base."""
        stmt = select(func.count()).where(
            FaqEntry.tenant_id == tenant_id, FaqEntry.knowledge_base_id == kb_id
        )
        async with self._sessions() as s:
            return int(await s.scalar(stmt) or 0)

    async def page(
        self, tenant_id: str, kb_id: str, *, page: int = 1, size: int = 20
    ) -> tuple[int, list[FaqRow]]:
        """(total, one page of entries), oldest first."""
        where = (FaqEntry.tenant_id == tenant_id, FaqEntry.knowledge_base_id == kb_id)
        stmt = (
            select(*_COLUMNS)
            .where(*where)
            .order_by(FaqEntry.created_at, FaqEntry.id)
            .offset((page - 1) * size)
            .limit(size)
        )
        async with self._sessions() as s:
            total = int(await s.scalar(select(func.count()).where(*where)) or 0)
            rows = (await s.execute(stmt)).all()
        return total, [_row(r) for r in rows]

    async def get(self, tenant_id: str, kb_id: str, entry_id: str) -> FaqRow | None:
        """One entry of ``kb_id``."""
        stmt = select(*_COLUMNS).where(
            FaqEntry.tenant_id == tenant_id,
            FaqEntry.knowledge_base_id == kb_id,
            FaqEntry.id == entry_id,
        )
        async with self._sessions() as s:
            row = (await s.execute(stmt)).first()
        return _row(row) if row else None

    async def replace(
        self,
        tenant_id: str,
        kb_id: str,
        entry_id: str,
        draft: FaqDraft,
        embedding: list[float] | None = None,
        *,
        queue_embedding: bool = False,
        user_id: str = "",
    ) -> bool:
        """Overwrite one entry of ``kb_id``; False when there is none. With
        ``queue_embedding`` its old vector goes and a job owing the new one is queued in
        the same transaction."""
        stmt = (
            update(FaqEntry)
            .where(
                FaqEntry.tenant_id == tenant_id,
                FaqEntry.knowledge_base_id == kb_id,
                FaqEntry.id == entry_id,
            )
            .values(
                question=draft.question,
                similar_text="\n".join(draft.similar_questions),
                answer=draft.answer,
                tag=draft.tag,
                embedding=embedding,
                updated_at=func.now(),
            )
        )
        async with self._sessions.begin() as s:
            result = await s.execute(stmt)
            replaced = bool(getattr(result, "rowcount", 0))
            if replaced and queue_embedding:
                await queue_embedding_job(s, tenant_id, kb_id, user_id, [entry_id])
        return replaced

    async def delete(self, tenant_id: str, kb_id: str, entry_id: str) -> bool:
        """Delete one entry of ``kb_id``; False when there is none."""
        stmt = delete(FaqEntry).where(
            FaqEntry.tenant_id == tenant_id,
            FaqEntry.knowledge_base_id == kb_id,
            FaqEntry.id == entry_id,
        )
        async with self._sessions.begin() as s:
            result = await s.execute(stmt)
        return bool(getattr(result, "rowcount", 0))

    async def tagged(
        self, tenant_id: str, kb_ids: list[str], tags: Sequence[str]
    ) -> list[tuple[str, str]]:
        """(FAQ knowledge base, tag) of the ``tags`` some entry in scope carries (all the
        tenant's bases when ``kb_ids`` is empty): SPEC A-11's @tag over FAQ bases."""
        if not tags:
            return []
        stmt = (
            select(FaqEntry.knowledge_base_id, FaqEntry.tag)
            .where(FaqEntry.tenant_id == tenant_id, FaqEntry.tag.in_(list(tags)))
            .distinct()
            .order_by(FaqEntry.knowledge_base_id, FaqEntry.tag)
        )
        if kb_ids:
            stmt = stmt.where(FaqEntry.knowledge_base_id.in_(kb_ids))
        async with self._sessions() as s:
            return [(r[0], r[1]) for r in (await s.execute(stmt)).all()]

    async def faq_bases(self, tenant_id: str, kb_ids: list[str]) -> dict[str, tuple[int, int]]:
        """FAQ knowledge bases in scope (all the tenant's when ``kb_ids`` is empty) ->
        (entries, entries with an embedding); bases without entries are left out."""
        stmt = (
            select(
                FaqEntry.knowledge_base_id,
                func.count(),
                func.count(FaqEntry.embedding),
            )
            .join(KnowledgeBase, KnowledgeBase.id == FaqEntry.knowledge_base_id)
            .where(FaqEntry.tenant_id == tenant_id, KnowledgeBase.kind == FAQ_KIND)
            .group_by(FaqEntry.knowledge_base_id)
        )
        if kb_ids:
            stmt = stmt.where(FaqEntry.knowledge_base_id.in_(kb_ids))
        async with self._sessions() as s:
            rows = (await s.execute(stmt)).all()
        return {r[0]: (int(r[1]), int(r[2])) for r in rows}

    async def keyword_search(
        self, tenant_id: str, kb_ids: list[str], query: str, limit: int,
        *, tags: Sequence[str] = (),
    ) -> list[FaqHit]:  # fmt: skip
        """Entries of ``kb_ids`` holding any word of ``query``, best first; only those
        tagged one of ``tags`` when given (SPEC A-11's @tag)."""
        words = keyword_tsquery(query)
        if not words or not kb_ids:
            return []
        tsq = func.to_tsquery("english", words)
        score = func.ts_rank_cd(FaqEntry.tsv, tsq).label("score")
        stmt = select(*_COLUMNS, score).where(
            FaqEntry.tenant_id == tenant_id,
            FaqEntry.knowledge_base_id.in_(kb_ids),
            FaqEntry.tsv.op("@@")(tsq),
        )
        if tags:
            stmt = stmt.where(FaqEntry.tag.in_(list(tags)))
        matched = stmt.limit(KEYWORD_CANDIDATES).subquery()
        stmt = select(matched).order_by(matched.c.score.desc(), matched.c.id).limit(limit)
        async with self._sessions() as s:
            rows = (await s.execute(stmt)).all()
        return [FaqHit(entry=_row(r), score=float(r.score)) for r in rows]

    async def embedding_version(self, tenant_id: str, kb_id: str) -> tuple[int, str]:
        """What changes whenever the base's vectors do: (entries with an embedding, the
        newest write among them); a semantic index reloads only when it moves."""
        stmt = select(func.count(), func.max(FaqEntry.updated_at)).where(
            FaqEntry.tenant_id == tenant_id,
            FaqEntry.knowledge_base_id == kb_id,
            FaqEntry.embedding.is_not(None),
        )
        async with self._sessions() as s:
            count, newest = (await s.execute(stmt)).one()
        return int(count), str(newest)

    async def vectors(
        self, tenant_id: str, kb_id: str
    ) -> tuple[list[str], list[str], list[list[float]]]:
        """(ids, tags, vectors) of the base's entries that have an embedding."""
        stmt = select(FaqEntry.id, FaqEntry.tag, FaqEntry.embedding).where(
            FaqEntry.tenant_id == tenant_id,
            FaqEntry.knowledge_base_id == kb_id,
            FaqEntry.embedding.is_not(None),
        )
        async with self._sessions() as s:
            rows = (await s.execute(stmt)).all()
        return [r[0] for r in rows], [r[1] for r in rows], [list(r[2] or []) for r in rows]

    async def by_ids(self, tenant_id: str, kb_ids: list[str], ids: list[str]) -> list[FaqRow]:
        """Entries of ``kb_ids`` by id, in the order asked (missing ones left out)."""
        if not ids or not kb_ids:
            return []
        stmt = select(*_COLUMNS).where(
            FaqEntry.tenant_id == tenant_id,
            FaqEntry.knowledge_base_id.in_(kb_ids),
            FaqEntry.id.in_(ids),
        )
        async with self._sessions() as s:
            found = {r.id: _row(r) for r in (await s.execute(stmt)).all()}
        return [found[i] for i in ids if i in found]

    async def embedded(
        self, tenant_id: str, kb_ids: list[str]
    ) -> tuple[list[FaqRow], list[list[float]]]:
        """Entries of ``kb_ids`` that have an embedding, and their vectors."""
        stmt = select(*_COLUMNS, FaqEntry.embedding).where(
            FaqEntry.tenant_id == tenant_id,
            FaqEntry.knowledge_base_id.in_(kb_ids),
            FaqEntry.embedding.is_not(None),
        )
        async with self._sessions() as s:
            rows = (await s.execute(stmt)).all()
        return [_row(r) for r in rows], [list(r.embedding) for r in rows]
