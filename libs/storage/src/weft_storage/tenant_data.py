"""Every PostgreSQL row of a tenant or of one user of a tenant: count and delete them.

The tables are found in the catalog, not listed here: a table with a ``tenant_id`` (or
``owner_tenant_id``) column holds tenant data, one that also has ``user_id`` holds user
data, one with ``session_id`` holds data of the sessions it names. A table a later
migration adds is covered without touching this module (the audit log has none of these
columns: it outlives what it records).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

BATCH = 5000
"""Rows per DELETE statement: one transaction per batch keeps locks and WAL bounded."""

_TENANT_COLUMNS = ("tenant_id", "owner_tenant_id")


@dataclass(frozen=True)
class TableShape:
    """A public table and which scoping columns it has."""

    name: str
    tenant_column: str | None
    has_user: bool
    has_session: bool


async def table_shapes(sessions: async_sessionmaker[AsyncSession]) -> list[TableShape]:
    """Public tables with at least one scoping column, sorted by name."""
    query = text(
        "SELECT table_name, array_agg(column_name::text) FROM information_schema.columns "
        "WHERE table_schema = 'public' AND column_name IN "
        "('tenant_id', 'owner_tenant_id', 'user_id', 'session_id') "
        "GROUP BY table_name ORDER BY table_name"
    )
    async with sessions() as s:
        rows = (await s.execute(query)).all()
    shapes = []
    for name, columns in rows:
        tenant = next((c for c in _TENANT_COLUMNS if c in columns), None)
        shapes.append(TableShape(name, tenant, "user_id" in columns, "session_id" in columns))
    return shapes


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class Scope:
    """What to count or delete: a whole tenant, or one user of it."""

    tenant_id: str
    user_id: str | None = None

    def predicate(self, table: TableShape) -> str | None:
        """The WHERE clause selecting this scope's rows of ``table`` (None: none there)."""
        if table.tenant_column is None:
            return None
        own = f"{table.tenant_column} = :tenant"
        if self.user_id is None:
            return own
        clauses = []
        if table.has_user:
            clauses.append("user_id = :user")
        if table.has_session:
            clauses.append(
                "session_id IN (SELECT id FROM sessions WHERE tenant_id = :tenant "
                "AND user_id = :user)"
            )
        if table.name == "sessions":
            clauses = ["user_id = :user"]
        if not clauses:
            return None
        return f"{own} AND ({' OR '.join(clauses)})"

    def params(self) -> dict[str, str]:
        """Bind parameters of :meth:`predicate`."""
        return {"tenant": self.tenant_id, "user": self.user_id or ""}


async def count_rows(sessions: async_sessionmaker[AsyncSession], scope: Scope) -> dict[str, int]:
    """Rows of ``scope`` per table (tables without any are listed with 0)."""
    counts: dict[str, int] = {}
    async with sessions() as s:
        for table in await table_shapes(sessions):
            where = scope.predicate(table)
            if where is None:
                continue
            sql = text(f"SELECT count(*) FROM {_quoted(table.name)} WHERE {where}")
            counts[table.name] = int((await s.execute(sql, scope.params())).scalar_one())
    return counts


async def delete_rows(sessions: async_sessionmaker[AsyncSession], scope: Scope) -> dict[str, int]:
    """Delete every row of ``scope``; rows deleted per table. Idempotent. Tables whose
    rows select through ``sessions`` go first, ``sessions`` itself last."""
    shapes = await table_shapes(sessions)
    ordered = sorted(shapes, key=lambda t: t.name == "sessions")
    deleted: dict[str, int] = {}
    for table in ordered:
        where = scope.predicate(table)
        if where is None:
            continue
        deleted[table.name] = await _delete_batched(sessions, table.name, where, scope)
    return deleted


async def _delete_batched(
    sessions: async_sessionmaker[AsyncSession], table: str, where: str, scope: Scope
) -> int:
    sql = text(
        f"DELETE FROM {_quoted(table)} WHERE ctid IN "
        f"(SELECT ctid FROM {_quoted(table)} WHERE {where} LIMIT {BATCH})"
    )
    total = 0
    while True:
        async with sessions.begin() as s:
            result = await s.execute(sql, scope.params())
        count = int(getattr(result, "rowcount", 0) or 0)
        total += count
        if count < BATCH:
            return total


async def session_ids(sessions: async_sessionmaker[AsyncSession], scope: Scope) -> list[str]:
    """Ids of the scope's sessions (deleted ones included)."""
    sql = "SELECT id FROM sessions WHERE tenant_id = :tenant"
    if scope.user_id is not None:
        sql += " AND user_id = :user"
    async with sessions() as s:
        return [str(r) for r in (await s.execute(text(sql), scope.params())).scalars()]


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
    """Retention: delete the tenant's messages created more than ``days`` ago; how many."""
    where = "tenant_id = :tenant AND created_at < now() - make_interval(secs => :secs)"
    sql = text(
        f"DELETE FROM messages WHERE ctid IN (SELECT ctid FROM messages WHERE {where} "
        f"LIMIT {BATCH})"
    )
    total = 0
    while True:
        async with sessions.begin() as s:
            result = await s.execute(sql, {"tenant": tenant_id, "secs": days * 86400.0})
        count = int(getattr(result, "rowcount", 0) or 0)
        total += count
        if count < BATCH:
            return total
