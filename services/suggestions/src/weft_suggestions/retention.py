"""Retention of ``suggestion_turns``: the questions and answers this service keeps to
generate follow-ups are copies of conversation text, needed only for the last few turns
of a live session (SPEC Q-02 ``max_context_turns``). Turns older than ``days`` are deleted
periodically, in small batches so a large backlog never holds long locks; every replica
may run it (deleting twice is harmless)."""

from __future__ import annotations

import asyncio

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

log = structlog.get_logger(__name__)

_PURGE = text("""
DELETE FROM suggestion_turns
WHERE ctid IN (
    SELECT ctid FROM suggestion_turns
    WHERE created_at < now() - make_interval(days => :days)
    LIMIT :batch
)
""")


class TurnRetention:
    """Deletes the turns older than ``days``, every ``interval_s``."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        days: int,
        interval_s: float,
        batch: int = 1000,
    ):
        self._sessions = sessions
        self._days = days
        self._interval_s = interval_s
        self._batch = batch
        self._task: asyncio.Task[None] | None = None

    async def purge(self) -> int:
        """Delete every turn past retention now; how many."""
        deleted = 0
        while True:
            async with self._sessions.begin() as s:
                result = await s.execute(_PURGE, {"days": self._days, "batch": self._batch})
            count = int(getattr(result, "rowcount", 0) or 0)
            deleted += count
            if count < self._batch:
                return deleted

    async def start(self) -> None:
        """Start the periodic purge."""
        self._task = asyncio.create_task(self._forever())

    async def stop(self) -> None:
        """Stop it."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _forever(self) -> None:
        while True:
            try:
                deleted = await self.purge()
                if deleted:
                    log.info("suggestion_turns_purged", deleted=deleted, days=self._days)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # PostgreSQL away: next round
                log.warning("suggestion_turns_purge_failed", error=repr(exc))
            await asyncio.sleep(self._interval_s)
