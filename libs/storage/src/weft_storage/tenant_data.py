"""Count and delete the PostgreSQL rows of a tenant or of one user, in a given set of tables.

Shared plumbing for the owners' purges (``weft_storage.owner_purge``): each owning service
passes its own tables (``weft_storage.ownership.OWNERS``), never another owner's. Which
rows belong to the scope is found in the catalog, not listed here: a table with a
``tenant_id`` (or ``owner_tenant_id``) column holds tenant data, one that also has
``user_id`` holds user data, one with ``session_id`` holds data of the sessions it names.
A table a later migration adds is covered without touching this module (the audit log has
none of these columns: it outlives what it records).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
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


async def table_shapes(
    sessions: async_sessionmaker[AsyncSession], tables: Collection[str]
) -> list[TableShape]:
    """The public tables of ``tables`` with a scoping column, sorted by name."""
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
        if name not in tables:
            continue
        tenant = next((c for c in _TENANT_COLUMNS if c in columns), None)
        shapes.append(TableShape(name, tenant, "user_id" in columns, "session_id" in columns))
    return shapes


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class Scope:
    """What to count or delete: a whole tenant, or one user of it.

    A user's rows in a table without ``user_id`` are those of the user's sessions:
    ``session_ids`` names them (the owner of ``sessions``, memory, tells the others which
    they are); None: they are read from ``sessions`` here, which only its owner (and a
    test) may do."""

    tenant_id: str
    user_id: str | None = None
    session_ids: tuple[str, ...] | None = None

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
        if table.has_session and self.session_ids is not None:
            clauses.append("session_id = ANY(:sessions)")
        elif table.has_session:
            clauses.append(
                "session_id IN (SELECT id FROM sessions WHERE tenant_id = :tenant "
                "AND user_id = :user)"
            )
        if table.name == "sessions":
            clauses = ["user_id = :user"]
        if not clauses:
            return None
        return f"{own} AND ({' OR '.join(clauses)})"

    def params(self) -> dict[str, str | list[str]]:
        """Bind parameters of :meth:`predicate`."""
        return {
            "tenant": self.tenant_id,
            "user": self.user_id or "",
            "sessions": list(self.session_ids or ()),
        }


async def count_rows(
    sessions: async_sessionmaker[AsyncSession],
    scope: Scope,
    tables: Collection[str],
) -> dict[str, int]:
    """Rows of ``scope`` per table of ``tables`` (a service passes its own,
    ``OWNERS[service]``); tables without any are listed with 0."""
    counts: dict[str, int] = {}
    async with sessions() as s:
        for table in await table_shapes(sessions, tables):
            where = scope.predicate(table)
            if where is None:
                continue
            sql = text(f"SELECT count(*) FROM {_quoted(table.name)} WHERE {where}")
            counts[table.name] = int((await s.execute(sql, scope.params())).scalar_one())
    return counts


async def delete_rows(
    sessions: async_sessionmaker[AsyncSession],
    scope: Scope,
    tables: Collection[str],
) -> dict[str, int]:
    """Delete every row of ``scope`` in ``tables`` (as :func:`count_rows`); rows deleted
    per table. Idempotent, in batches: a purge stopped midway is finished by running it
    again. Tables whose rows select through ``sessions`` go first, ``sessions`` last."""
    shapes = await table_shapes(sessions, tables)
    ordered = sorted(shapes, key=lambda t: t.name == "sessions")
    deleted: dict[str, int] = {}
    for table in ordered:
        where = scope.predicate(table)
        if where is None:
            continue
        deleted[table.name] = await delete_batched(sessions, table.name, where, scope.params())
    return deleted


async def delete_batched(
    sessions: async_sessionmaker[AsyncSession],
    table: str,
    where: str,
    params: Mapping[str, object],
) -> int:
    """Delete the rows of ``table`` matching ``where`` (bound by ``params``), ``BATCH`` rows
    a transaction; how many."""
    sql = text(
        f"DELETE FROM {_quoted(table)} WHERE ctid IN "
        f"(SELECT ctid FROM {_quoted(table)} WHERE {where} LIMIT {BATCH})"
    )
    total = 0
    while True:
        async with sessions.begin() as s:
            result = await s.execute(sql, dict(params))
        count = int(getattr(result, "rowcount", 0) or 0)
        total += count
        if count < BATCH:
            return total
