"""The embedding queue of FAQ entries (SPEC C-04): a write of entries (an import, a
created or replaced entry) stores them at once, keyword-searchable, and queues one job
that owes their questions' embeddings; the ingestion workers claim jobs off the request
path, as they claim documents.

A job is ``pending`` -> ``processing`` -> ``ready`` | ``failed``. Workers claim with
``FOR UPDATE SKIP LOCKED``, the tenant with the fewest jobs in progress first; a claim
older than ``stale_after_s`` (its worker died) is taken over; a failed attempt is retried
after a backoff up to the worker's bound. Each batch of vectors is stored with the job's
progress and running token total in one transaction, and only on entries the job still
owes (an entry replaced meanwhile belongs to a newer job), so a retried or taken-over job
embeds only what is left and reports the same total.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import and_, delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import aliased
from ulid import ULID

from weft_storage.knowledge.ingest import INGESTION_CHANNEL
from weft_storage.knowledge.models import FaqEntry
from weft_storage.knowledge.models_faq import FaqEmbeddingJob

JOB_STATES = ("pending", "processing", "ready", "failed")
KEEP_READY = 100
"""Ready jobs kept per knowledge base (the newest; older ones are deleted as a job ends,
so the queue stays bounded however often entries are rewritten)."""


@dataclass(frozen=True, kw_only=True)
class EmbeddingJob:
    """A claimed job."""

    id: str
    tenant_id: str
    knowledge_base_id: str
    user_id: str
    attempts: int
    input_tokens: int
    embedding_calls: int


@dataclass(frozen=True, kw_only=True)
class OwedEntry:
    """An entry whose question the job still has to embed."""

    id: str
    question: str


async def queue_embedding_job(
    s: AsyncSession, tenant_id: str, kb_id: str, user_id: str, entry_ids: Sequence[str]
) -> str:
    """A ``pending`` job owing the embeddings of ``entry_ids`` (in the caller's
    transaction, the one that writes the entries); the workers are woken at commit."""
    job_id = f"fqj_{ULID()}"
    s.add(
        FaqEmbeddingJob(
            id=job_id, tenant_id=tenant_id, knowledge_base_id=kb_id, user_id=user_id,
            status="pending", entry_count=len(entry_ids),
        )
    )  # fmt: skip
    await s.flush()
    await s.execute(
        update(FaqEntry)
        .where(FaqEntry.tenant_id == tenant_id, FaqEntry.id.in_(list(entry_ids)))
        .values(embedding_job_id=job_id, embedding=None, updated_at=func.now())
    )
    await s.execute(select(func.pg_notify(INGESTION_CHANNEL, "")))
    return job_id


class FaqEmbeddingQueue:
    """Claims, progress and ends of FAQ embedding jobs."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, stale_after_s: float = 300):
        self._sessions = sessions
        self._stale = timedelta(seconds=stale_after_s)

    async def claim(
        self, *, tenant_max_inflight: int | None = None, tenants: Sequence[str] = ()
    ) -> EmbeddingJob | None:
        """Take a due job (or one whose worker died), or None: the tenant with the fewest
        jobs in progress first, then the oldest due; a tenant with
        ``tenant_max_inflight`` in progress is passed over (a soft cap, as documents');
        of ``tenants`` only, when given (workers dedicated to some tenants)."""
        now = datetime.now(UTC)
        stale = now - self._stale
        due = or_(
            and_(FaqEmbeddingJob.status == "pending", FaqEmbeddingJob.not_before <= now),
            and_(FaqEmbeddingJob.status == "processing", FaqEmbeddingJob.updated_at < stale),
        )
        other = aliased(FaqEmbeddingJob)
        in_progress = (
            select(func.count())
            .select_from(other)
            .where(
                other.tenant_id == FaqEmbeddingJob.tenant_id,
                other.status == "processing",
                other.updated_at >= stale,
            )
            .correlate(FaqEmbeddingJob)
            .scalar_subquery()
        )
        stmt = (
            select(FaqEmbeddingJob)
            .where(due)
            .order_by(in_progress, FaqEmbeddingJob.not_before)
            .limit(1)
            .with_for_update(skip_locked=True)
        )
        if tenant_max_inflight is not None:
            stmt = stmt.where(in_progress < tenant_max_inflight)
        if tenants:
            stmt = stmt.where(FaqEmbeddingJob.tenant_id.in_(list(tenants)))
        async with self._sessions.begin() as s:
            job = await s.scalar(stmt)
            if job is None:
                return None
            job.status, job.updated_at, job.attempts = "processing", func.now(), job.attempts + 1
            return EmbeddingJob(
                id=job.id, tenant_id=job.tenant_id, knowledge_base_id=job.knowledge_base_id,
                user_id=job.user_id, attempts=job.attempts, input_tokens=job.input_tokens,
                embedding_calls=job.embedding_calls,
            )  # fmt: skip

    async def owed(self, job: EmbeddingJob, limit: int) -> list[OwedEntry]:
        """Up to ``limit`` entries the job still has to embed, oldest first."""
        stmt = (
            select(FaqEntry.id, FaqEntry.question)
            .where(
                FaqEntry.tenant_id == job.tenant_id,
                FaqEntry.embedding_job_id == job.id,
                FaqEntry.embedding.is_(None),
            )
            .order_by(FaqEntry.created_at, FaqEntry.id)
            .limit(limit)
        )
        async with self._sessions() as s:
            return [OwedEntry(id=i, question=q) for i, q in (await s.execute(stmt)).all()]

    async def save_batch(
        self, job: EmbeddingJob, entry_ids: Sequence[str], vectors: Sequence[list[float]],
        tokens: int,
    ) -> int:  # fmt: skip
        """Store one batch of vectors on the entries the job still owes, with the job's
        progress and token total, in one transaction; the job's total tokens now."""
        async with self._sessions.begin() as s:
            for entry_id, vector in zip(entry_ids, vectors, strict=True):
                await s.execute(
                    update(FaqEntry)
                    .where(
                        FaqEntry.tenant_id == job.tenant_id,
                        FaqEntry.id == entry_id,
                        FaqEntry.embedding_job_id == job.id,
                    )
                    .values(embedding=vector, updated_at=func.now())
                )
            embedded = await s.scalar(
                select(func.count()).where(
                    FaqEntry.embedding_job_id == job.id, FaqEntry.embedding.is_not(None)
                )
            )
            total = await s.scalar(
                update(FaqEmbeddingJob)
                .where(FaqEmbeddingJob.id == job.id)
                .values(
                    embedded_count=int(embedded or 0),
                    input_tokens=FaqEmbeddingJob.input_tokens + tokens,
                    embedding_calls=FaqEmbeddingJob.embedding_calls + 1,
                    updated_at=func.now(),
                )
                .returning(FaqEmbeddingJob.input_tokens)
            )
        return int(total or 0)

    async def totals(self, job: EmbeddingJob) -> tuple[int, int]:
        """(input tokens, embedding calls) the job has spent so far, every attempt's."""
        stmt = select(FaqEmbeddingJob.input_tokens, FaqEmbeddingJob.embedding_calls).where(
            FaqEmbeddingJob.id == job.id
        )
        async with self._sessions() as s:
            row = (await s.execute(stmt)).first()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    async def finish(self, job: EmbeddingJob) -> None:
        """Mark the job ``ready``; the entries it embedded no longer name it; the base
        keeps its :data:`KEEP_READY` newest ready jobs."""
        async with self._sessions.begin() as s:
            await s.execute(
                update(FaqEntry)
                .where(FaqEntry.embedding_job_id == job.id, FaqEntry.embedding.is_not(None))
                .values(embedding_job_id=None)
            )
            await s.execute(
                update(FaqEmbeddingJob)
                .where(FaqEmbeddingJob.id == job.id)
                .values(status="ready", error=None, updated_at=func.now())
            )
            kept = (
                select(FaqEmbeddingJob.id)
                .where(
                    FaqEmbeddingJob.knowledge_base_id == job.knowledge_base_id,
                    FaqEmbeddingJob.status == "ready",
                )
                .order_by(FaqEmbeddingJob.updated_at.desc(), FaqEmbeddingJob.id.desc())
                .limit(KEEP_READY)
            )
            await s.execute(
                delete(FaqEmbeddingJob).where(
                    FaqEmbeddingJob.tenant_id == job.tenant_id,
                    FaqEmbeddingJob.knowledge_base_id == job.knowledge_base_id,
                    FaqEmbeddingJob.status == "ready",
                    FaqEmbeddingJob.id.not_in(kept.scalar_subquery()),
                )
            )

    async def fail(self, job: EmbeddingJob, error: str, *, retry_in_s: float | None) -> None:
        """Record a failed attempt: ``pending`` again after ``retry_in_s``, or ``failed``
        for good when it is None (the entries stay keyword-searchable)."""
        values: dict[str, object] = {"error": error[:2000], "updated_at": func.now()}
        if retry_in_s is None:
            values["status"] = "failed"
        else:
            values["status"] = "pending"
            values["not_before"] = func.now() + timedelta(seconds=retry_in_s)
        async with self._sessions.begin() as s:
            await s.execute(
                update(FaqEmbeddingJob).where(FaqEmbeddingJob.id == job.id).values(**values)
            )

    async def progress(self, tenant_id: str, kb_id: str) -> dict[str, object]:
        """An FAQ base's embedding progress: its entries, those embedded, its jobs by
        state, and the last failure's reason (what ``GET`` of the KB shows)."""
        entries = select(func.count(), func.count(FaqEntry.embedding)).where(
            FaqEntry.tenant_id == tenant_id, FaqEntry.knowledge_base_id == kb_id
        )
        where = (FaqEmbeddingJob.tenant_id == tenant_id, FaqEmbeddingJob.knowledge_base_id == kb_id)
        jobs = (
            select(FaqEmbeddingJob.status, func.count())
            .where(*where)
            .group_by(FaqEmbeddingJob.status)
        )
        failure = (
            select(FaqEmbeddingJob.error)
            .where(*where, FaqEmbeddingJob.error.is_not(None), FaqEmbeddingJob.status != "ready")
            .order_by(FaqEmbeddingJob.updated_at.desc())
            .limit(1)
        )
        async with self._sessions() as s:
            total, embedded = (await s.execute(entries)).one()
            states = {str(k): int(n) for k, n in (await s.execute(jobs)).all()}
            error = await s.scalar(failure)
        return {
            "entries": int(total),
            "embedded": int(embedded),
            "jobs": {state: states.get(state, 0) for state in JOB_STATES},
            "error": error,
        }
