"""Issues flagged on wiki pages, and the queue of documents whose wiki pages the
ingestion workers generate (SPEC T-18).

An issue names its page by slug in its knowledge base (it outlives a rename through the
rename's own update, and a deleted page's issues stay readable). Its status is
``pending`` until someone marks it ``resolved`` or ``ignored``.

The generation queue holds one row per ready document of a wiki knowledge base:
``pending`` -> ``generating`` -> ``done`` | ``failed``, claimed with ``SKIP LOCKED`` like
the ingestion queue; a failed attempt goes back to ``pending`` after a backoff until the
attempts run out. What a KB shows of its wiki's progress is these rows counted by status.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from sqlalchemy import func, or_, select, true, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from ulid import ULID

from weft_storage.knowledge.fair_claims import running_per_tenant
from weft_storage.knowledge.models import Document, KnowledgeBase
from weft_storage.knowledge.models_wiki import WikiGeneration, WikiIssue, WikiPage

IssueType = Literal["mixed_entities", "contradictory_facts", "out_of_date", "other"]
IssueStatus = Literal["pending", "resolved", "ignored"]
MAX_ATTEMPTS = 3


@dataclass(frozen=True, kw_only=True)
class Issue:
    """One flagged issue."""

    id: str
    knowledge_base_id: str
    slug: str
    issue_type: str
    description: str
    suspected_knowledge_ids: list[str]
    status: str
    reported_by: str
    created_at: str
    updated_at: str


def _issue(row: WikiIssue) -> Issue:
    return Issue(
        id=row.id,
        knowledge_base_id=row.knowledge_base_id,
        slug=row.slug,
        issue_type=row.issue_type,
        description=row.description,
        suspected_knowledge_ids=list(row.suspected_knowledge_ids),
        status=row.status,
        reported_by=row.reported_by,
        created_at=row.created_at.isoformat(),
        updated_at=row.updated_at.isoformat(),
    )


class WikiIssues:
    """Issues of a tenant's wiki pages (every query carries the tenant and the KBs)."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self._sessions = sessions

    async def flag(
        self,
        tenant_id: str,
        kb_id: str,
        slug: str,
        issue_type: IssueType,
        description: str,
        suspected: Sequence[str],
        reported_by: str,
    ) -> Issue:
        """Record an issue on the page ``slug`` of ``kb_id`` (the caller checked it)."""
        row = WikiIssue(
            id=f"wi_{ULID()}",
            tenant_id=tenant_id,
            knowledge_base_id=kb_id,
            slug=slug,
            issue_type=issue_type,
            description=description,
            suspected_knowledge_ids=list(suspected),
            status="pending",
            reported_by=reported_by,
        )
        async with self._sessions.begin() as s:
            s.add(row)
            await s.flush()
            await s.refresh(row)
        return _issue(row)

    async def get(self, tenant_id: str, kb_ids: Sequence[str], issue_id: str) -> Issue | None:
        """One issue in reach."""
        async with self._sessions() as s:
            row = await s.scalar(_in_reach(tenant_id, kb_ids).where(WikiIssue.id == issue_id))
        return None if row is None else _issue(row)

    async def for_page(
        self, tenant_id: str, kb_ids: Sequence[str], slug: str | None, status: str | None
    ) -> list[Issue]:
        """Issues of the page ``slug`` (every page's when None) with ``status`` (any when
        None), newest first, at most 100."""
        stmt = _in_reach(tenant_id, kb_ids)
        if slug is not None:
            stmt = stmt.where(WikiIssue.slug == slug)
        if status is not None:
            stmt = stmt.where(WikiIssue.status == status)
        stmt = stmt.order_by(WikiIssue.created_at.desc(), WikiIssue.id.desc()).limit(100)
        async with self._sessions() as s:
            return [_issue(r) for r in (await s.scalars(stmt)).all()]

    async def set_status(
        self, tenant_id: str, kb_ids: Sequence[str], issue_id: str, status: IssueStatus
    ) -> Issue | None:
        """Change an issue's status; None when it is not in reach."""
        async with self._sessions.begin() as s:
            row = await s.scalar(
                _in_reach(tenant_id, kb_ids).where(WikiIssue.id == issue_id).with_for_update()
            )
            if row is None:
                return None
            row.status, row.updated_at = status, func.now()
            await s.flush()
            await s.refresh(row)
        return _issue(row)


def _in_reach(tenant_id: str, kb_ids: Sequence[str]) -> Any:
    stmt = select(WikiIssue).where(WikiIssue.tenant_id == tenant_id)
    if kb_ids:
        stmt = stmt.where(WikiIssue.knowledge_base_id.in_(list(kb_ids)))
    return stmt


@dataclass(frozen=True, kw_only=True)
class GenerationJob:
    """A claimed document to write wiki pages from."""

    document_id: str
    tenant_id: str
    knowledge_base_id: str
    title: str
    attempts: int


GENERATION_QUEUED_STATES = ("pending", "paused", "generating")
"""States of a wiki generation job not finished yet (``paused``: its tenant is over budget)."""


async def queue_generation(s: AsyncSession, document_id: str) -> None:
    """In the caller's transaction (a document turning ready): queue its wiki pages when
    its knowledge base has a wiki; a document ingested again is generated again."""
    source = (
        select(Document.id, Document.tenant_id, Document.knowledge_base_id, func.now(), func.now())
        .join(KnowledgeBase, KnowledgeBase.id == Document.knowledge_base_id)
        .where(Document.id == document_id, KnowledgeBase.wiki_enabled.is_(True))
    )
    columns = ["document_id", "tenant_id", "knowledge_base_id", "next_attempt_at", "updated_at"]
    stmt = insert(WikiGeneration).from_select(columns, source)
    await s.execute(
        stmt.on_conflict_do_update(
            index_elements=["document_id"],
            set_={"status": "pending", "attempts": 0, "error": None, "updated_at": func.now()},
        )
    )


class WikiGenerations:
    """The generation queue (workers claim; the KB read shows its progress)."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, stale_after_s: float = 600):
        self._sessions = sessions
        self._stale = timedelta(seconds=stale_after_s)

    async def claim(self, tenants: Sequence[str] = ()) -> GenerationJob | None:
        """A pending document whose retry time has come (or an abandoned claim); of
        ``tenants`` only, when given (workers dedicated to some tenants).

        Fair across tenants, as the documents' queue is (``IngestionQueue.claim``): the job
        of the tenant with the fewest generations running now goes first, then the one due
        first, so one tenant's backlog never holds every worker."""
        now = datetime.now(UTC)
        g = WikiGeneration
        running = running_per_tenant(g, "generating", now - self._stale)
        waiting = or_(
            g.status.in_(("pending", "paused")) & (g.next_attempt_at <= now),
            (g.status == "generating") & (g.updated_at < now - self._stale),
        )
        stmt = (
            select(g, Document.title)
            .join(Document, Document.id == g.document_id)
            .join(KnowledgeBase, KnowledgeBase.id == g.knowledge_base_id)
            # A KB whose wiki was switched off keeps its queue; it resumes when switched on.
            .where(waiting, Document.status == "ready", KnowledgeBase.wiki_enabled.is_(True))
            .where(g.tenant_id.in_(list(tenants)) if tenants else true())
            .order_by(running, g.next_attempt_at)
            .limit(1)
            .with_for_update(of=g, skip_locked=True)
        )
        async with self._sessions.begin() as s:
            row = (await s.execute(stmt)).first()
            if row is None:
                return None
            job, title = row
            job.status, job.attempts, job.updated_at = "generating", job.attempts + 1, func.now()
            return GenerationJob(
                document_id=job.document_id,
                tenant_id=job.tenant_id,
                knowledge_base_id=job.knowledge_base_id,
                title=title,
                attempts=job.attempts,
            )

    async def done(self, document_id: str, pages: int) -> None:
        """The document's pages are written."""
        await self._set(document_id, status="done", pages=pages, error=None)

    async def failed(self, job: GenerationJob, error: str, *, backoff_s: float) -> bool:
        """Record a failed attempt: back to ``pending`` after ``backoff_s`` while attempts
        remain (True), else ``failed`` for good (False)."""
        if job.attempts < MAX_ATTEMPTS:
            later = datetime.now(UTC) + timedelta(seconds=backoff_s)
            await self._set(job.document_id, status="pending", error=error, next_attempt_at=later)
            return True
        await self._set(job.document_id, status="failed", error=error)
        return False

    async def pause(self, job: GenerationJob, reason: str, *, until: datetime) -> None:
        """Put the job back, ``paused`` with ``reason`` until ``until`` (its tenant is over
        its token budget); the attempt does not count."""
        await self._set(
            job.document_id,
            status="paused",
            error=reason,
            next_attempt_at=until,
            attempts=job.attempts - 1,
        )

    async def depth(self) -> dict[str, int]:
        """Generation jobs not finished, by state (:data:`GENERATION_QUEUED_STATES`), over
        every tenant: what the worker's queue-depth metric reports."""
        g = WikiGeneration
        query = (
            select(g.status, func.count())
            .where(g.status.in_(GENERATION_QUEUED_STATES))
            .group_by(g.status)
        )
        async with self._sessions() as s:
            found = {str(k): int(n) for k, n in (await s.execute(query)).all()}
        return {state: found.get(state, 0) for state in GENERATION_QUEUED_STATES}

    async def progress(self, tenant_id: str, kb_id: str) -> dict[str, Any]:
        """The KB's wiki: documents by generation status, its pages, the last error."""
        g = WikiGeneration
        async with self._sessions() as s:
            counts = dict(
                (
                    await s.execute(
                        select(g.status, func.count())
                        .where(g.tenant_id == tenant_id, g.knowledge_base_id == kb_id)
                        .group_by(g.status)
                    )
                ).all()
            )
            pages = await s.scalar(
                select(func.count())
                .select_from(WikiPage)
                .where(WikiPage.tenant_id == tenant_id, WikiPage.knowledge_base_id == kb_id)
            )
            error = await s.scalar(
                select(g.error)
                .where(g.tenant_id == tenant_id, g.knowledge_base_id == kb_id, g.error.is_not(None))
                .order_by(g.updated_at.desc())
                .limit(1)
            )
        states = ("pending", "paused", "generating", "done", "failed")
        return {
            "documents": {state: int(counts.get(state, 0)) for state in states},
            "pages": int(pages or 0),
            "last_error": error,
        }

    async def _set(self, document_id: str, **values: Any) -> None:
        async with self._sessions.begin() as s:
            await s.execute(
                update(WikiGeneration)
                .where(WikiGeneration.document_id == document_id)
                .values(updated_at=func.now(), **values)
            )
