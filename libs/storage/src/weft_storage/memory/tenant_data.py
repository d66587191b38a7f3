"""memory's side of a purge: which sessions and turns a tenant or user has (the gateway
needs them for the Redis keys they name, the other owners for their rows of a user's
sessions), and retention of old messages."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from weft_storage.tenant_data import delete_batched


async def session_ids(
    sessions: async_sessionmaker[AsyncSession], tenant_id: str, user_id: str | None = None
) -> list[str]:
    """Ids of the tenant's (or its user's) sessions, deleted ones included."""
    sql = "SELECT id FROM sessions WHERE tenant_id = :tenant"
    if user_id is not None:
        sql += " AND user_id = :user"
    params = {"tenant": tenant_id, "user": user_id or ""}
    async with sessions() as s:
        return [str(r) for r in (await s.execute(text(sql), params)).scalars()]


async def request_ids(
    sessions: async_sessionmaker[AsyncSession], tenant_id: str, session_ids: Sequence[str]
) -> list[str]:
    """Turn ids (``request_id``) of these sessions' messages."""
    if not session_ids:
        return []
    sql = text(
        "SELECT DISTINCT request_id FROM messages WHERE tenant_id = :tenant "
        "AND session_id = ANY(:sessions)"
    )
    async with sessions() as s:
        rows = await s.execute(sql, {"tenant": tenant_id, "sessions": list(session_ids)})
        return [str(r) for r in rows.scalars()]


async def delete_messages_older_than(
    sessions: async_sessionmaker[AsyncSession], tenant_id: str, days: float
) -> int:
    """Retention: delete the tenant's messages created more than ``days`` ago (by the
    database's clock); how many."""
    where = "tenant_id = :tenant AND created_at < now() - make_interval(secs => :secs)"
    params: dict[str, object] = {"tenant": tenant_id, "secs": days * 86400.0}
    return await delete_batched(sessions, "messages", where, params)
