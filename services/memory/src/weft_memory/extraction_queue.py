"""ExtractionQueue: which completed turns still owe long-term facts (SPEC M-10).

The recorder opens a row when ``turn_started`` says the agent has memory on (the setting
the engine resolved for this turn, carried by the event) and marks it ``pending`` in the
same transaction that stores the turn's ``complete``. Workers claim pending rows with
``FOR UPDATE SKIP LOCKED`` (any number of memory replicas, no coordinator) and store the
facts and ``done`` in one transaction, so a turn yields its facts once: a re-delivered
event never reopens a row, a worker that dies mid-call leaves a ``running`` row that is
taken over after ``stale_after_s``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, or_, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_storage.memory.models_memory import MemoryExtraction

from weft_memory.longterm import store_facts

WAITING, PENDING, RUNNING = "waiting", "pending", "running"
DONE, FAILED, SKIPPED = "done", "failed", "skipped"
MAX_ERROR_CHARS = 2000


@dataclass(frozen=True, kw_only=True)
class ExtractionJob:
    """A claimed turn to learn from."""

    request_id: str
    tenant_id: str
    user_id: str
    session_id: str
    attempts: int
    """Attempts so far, this one included."""


async def expect_extraction(
    s: AsyncSession, *, request_id: str, tenant_id: str, user_id: str, session_id: str
) -> None:
    """Open the row of a turn whose agent has memory on (in the recorder's transaction)."""
    row = {
        "request_id": request_id, "tenant_id": tenant_id, "user_id": user_id,
        "session_id": session_id, "status": WAITING,
    }  # fmt: skip
    await s.execute(insert(MemoryExtraction).values(**row).on_conflict_do_nothing())


async def turn_ended(s: AsyncSession, request_id: str, *, completed: bool) -> bool:
    """Mark a waiting row pending (completed turn) or skipped; True when it became pending.
    A row already past ``waiting`` (a re-delivered ``complete``) is left alone."""
    status = PENDING if completed else SKIPPED
    result = await s.execute(
        update(MemoryExtraction)
        .where(MemoryExtraction.request_id == request_id, MemoryExtraction.status == WAITING)
        .values(status=status, updated_at=func.now(), not_before=func.now())
        .returning(MemoryExtraction.request_id)
    )
    return completed and result.first() is not None


class ExtractionQueue:
    """Claims and settles extraction rows."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, stale_after_s: float = 300):
        self._sessions = sessions
        self._stale = timedelta(seconds=stale_after_s)

    async def claim(self) -> ExtractionJob | None:
        """The oldest pending row due now (or a running one abandoned by its worker)."""
        now, row = datetime.now(UTC), MemoryExtraction
        todo = or_(
            (row.status == PENDING) & (row.not_before <= now),
            (row.status == RUNNING) & (row.updated_at < now - self._stale),
        )
        stmt = (
            select(MemoryExtraction)
            .where(todo)
            .order_by(MemoryExtraction.created_at)
            .limit(1)
            .with_for_update(skip_locked=True)
        )
        async with self._sessions.begin() as s:
            row = await s.scalar(stmt)
            if row is None:
                return None
            job = ExtractionJob(
                request_id=row.request_id,
                tenant_id=row.tenant_id,
                user_id=row.user_id,
                session_id=row.session_id,
                attempts=row.attempts + 1,
            )
            row.status, row.attempts, row.updated_at = RUNNING, job.attempts, func.now()
            return job

    async def done(self, job: ExtractionJob, facts: list[str]) -> list[str]:
        """Store the facts and mark the row done, atomically; returns the fact ids."""
        async with self._sessions.begin() as s:
            ids = await store_facts(
                s, job.tenant_id, job.user_id, facts,
                session_id=job.session_id, request_id=job.request_id,
            )  # fmt: skip
            await self._settle(s, job, DONE, facts=len(ids))
        return ids

    async def skip(self, job: ExtractionJob, reason: str) -> None:
        """Nothing to learn from (the turn was deleted meanwhile)."""
        async with self._sessions.begin() as s:
            await self._settle(s, job, SKIPPED, error=reason)

    async def failed(self, job: ExtractionJob, error: str, *, retry_in_s: float | None) -> None:
        """Record a failure; pending again after ``retry_in_s``, else ``failed`` for good."""
        async with self._sessions.begin() as s:
            if retry_in_s is None:
                await self._settle(s, job, FAILED, error=error)
                return
            await s.execute(
                update(MemoryExtraction)
                .where(MemoryExtraction.request_id == job.request_id)
                .values(
                    status=PENDING, error=error[:MAX_ERROR_CHARS], updated_at=func.now(),
                    not_before=func.now() + timedelta(seconds=retry_in_s),
                )
            )  # fmt: skip

    async def _settle(
        self, s: AsyncSession, job: ExtractionJob, status: str, *, facts: int = 0,
        error: str | None = None,
    ) -> None:  # fmt: skip
        await s.execute(
            update(MemoryExtraction)
            .where(MemoryExtraction.request_id == job.request_id)
            .values(
                status=status, facts=facts, updated_at=func.now(),
                error=None if error is None else error[:MAX_ERROR_CHARS],
            )
        )  # fmt: skip

    async def get(self, tenant_id: str, request_id: str) -> MemoryExtraction | None:
        """The row of one turn of ``tenant_id``."""
        async with self._sessions() as s:
            row = await s.get(MemoryExtraction, request_id)
        return row if row is not None and row.tenant_id == tenant_id else None
