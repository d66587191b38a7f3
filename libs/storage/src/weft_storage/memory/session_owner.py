"""Whether a session is a live one of a given user: the check every internal route makes
when a request names a session but the data it reaches is found by tenant and session
alone (a workspace, a starter event), so that a credential of one user never reaches
another user's session of the same tenant (docs/security.md "Credentials stay inside")."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from weft_storage.memory.models import ChatSession


async def owns_session(
    sessions: async_sessionmaker[AsyncSession], tenant_id: str, user_id: str, session_id: str
) -> bool:
    """True when ``session_id`` is a live (not deleted) session of ``user_id`` in
    ``tenant_id``; one indexed lookup by primary key."""
    async with sessions() as s:
        found = await s.scalar(
            select(ChatSession.id).where(
                ChatSession.id == session_id,
                ChatSession.tenant_id == tenant_id,
                ChatSession.user_id == user_id,
                ChatSession.deleted_at.is_(None),
            )
        )
    return found is not None
