"""SessionLock: one writer per session across replicas, as a PostgreSQL advisory lock.

A replica's own lock (``SandboxHost``) keeps its calls of a session one at a time; this
one keeps two replicas from both changing the same session's workspace (a tool call on
one, an attachment upload on another) and so from both creating the same checkpoint
number. It is held on a connection of its own for the whole change, so it is released
when its holder dies (PostgreSQL ends the connection's locks with it).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncIterator

import structlog
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

log = structlog.get_logger(__name__)

LOCK_NOT_AVAILABLE = "55P03"
"""SQLSTATE of a lock wait that ran past ``lock_timeout``."""


class WorkspaceBusy(RuntimeError):
    """Another call or upload held the session's workspace past the wait."""


def lock_id(key: str) -> int:
    """The advisory lock number (a signed 64-bit integer) of a workspace key."""
    digest = hashlib.sha256(f"weft-sandbox\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class SessionLock:
    """Advisory locks on an engine whose pool has a connection for each lock held."""

    def __init__(self, engine: AsyncEngine):
        self._engine = engine

    @contextlib.asynccontextmanager
    async def held(self, key: str, wait_s: float) -> AsyncIterator[None]:
        """Hold the lock of workspace ``key``; :class:`WorkspaceBusy` after ``wait_s``."""
        number = lock_id(key)
        async with self._engine.connect() as conn:
            try:
                # An int, never text from outside: SET takes no bind parameters.
                await conn.execute(text(f"SET lock_timeout = {max(1, int(wait_s * 1000))}"))
                await conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": number})
            except DBAPIError as exc:
                if _sqlstate(exc) == LOCK_NOT_AVAILABLE:
                    raise WorkspaceBusy(f"workspace busy for more than {wait_s:.0f}s") from None
                raise
            await conn.commit()  # the lock is the session's, not the transaction's
            try:
                yield
            finally:
                try:
                    await conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": number})
                    await conn.commit()
                except Exception:  # a connection that may still hold it never goes back
                    log.warning("session_unlock_failed", exc_info=True)
                    await conn.invalidate()


def _sqlstate(exc: DBAPIError) -> str | None:
    orig = exc.orig
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    cause = getattr(orig, "__cause__", None)
    return code or getattr(cause, "sqlstate", None)
