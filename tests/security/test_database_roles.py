"""Each service's PostgreSQL role reaches its own tables only (docs/architecture.md,
"Data ownership"; ``weft_storage.ownership``).

Connected over a real connection as a service's role (as a service process is), every
public table is tried with SELECT, INSERT, UPDATE and DELETE statements that change no
row (in a transaction rolled back): the rights found must be exactly the owner's (its own
tables), none on another owner's table.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from weft_storage.ownership import (
    OWNED_TABLES,
    RETIRED_ROLES,
    SERVICE_ROLES,
    SQL_READER,
    SQL_READER_MEMBERS,
    granted,
    owner_of,
    service_url,
)
from weft_storage.roles import apply_grants

MIGRATION_LOCK = 0x77656674
"""``weft_storage/migrations/env.py``'s advisory lock: grants are not re-applied at once."""

PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE")


def _dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


@pytest.fixture
async def owner_conn(migrated: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(_dsn(migrated))
    yield conn
    await conn.close()


async def _connect_as(migrated: str, service: str) -> asyncpg.Connection:
    return await asyncpg.connect(_dsn(service_url(migrated, service)))


async def _tables(conn: asyncpg.Connection) -> dict[str, str]:
    """Public table -> one of its columns (for a no-op UPDATE)."""
    rows = await conn.fetch(
        "SELECT c.relname, (SELECT attname FROM pg_attribute WHERE attrelid = c.oid "
        "AND attnum > 0 AND NOT attisdropped ORDER BY attnum LIMIT 1) AS col "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') ORDER BY 1"
    )
    return {r["relname"]: r["col"] for r in rows}


def _attempts(table: str, column: str) -> dict[str, str]:
    """A statement per privilege that touches no row: PostgreSQL checks the privilege
    before it looks at any row (an INSERT of defaults fails on a NOT NULL column after
    the check, and is rolled back otherwise)."""
    t, c = f'public."{table}"', f'"{column}"'
    return {
        "SELECT": f"SELECT 1 FROM {t} LIMIT 0",
        "INSERT": f"INSERT INTO {t} DEFAULT VALUES",
        "UPDATE": f"UPDATE {t} SET {c} = {c} WHERE false",
        "DELETE": f"DELETE FROM {t} WHERE false",
    }


async def _may(conn: asyncpg.Connection, statement: str, *, as_reader: bool = False) -> bool:
    """Whether the connected role (``as_reader``: after ``SET LOCAL ROLE`` to the reader)
    may run ``statement`` (its effect is rolled back)."""
    tx = conn.transaction()
    await tx.start()
    try:
        if as_reader:
            await conn.execute(f"SET LOCAL ROLE {SQL_READER}")
        await conn.execute(statement)
    except asyncpg.InsufficientPrivilegeError:
        return False
    except asyncpg.PostgresError:
        return True  # past the privilege check (a constraint or trigger refused it)
    finally:
        await tx.rollback()
    return True


@pytest.mark.parametrize("service", sorted(SERVICE_ROLES))
async def test_a_service_role_reaches_its_own_tables_and_no_other(
    migrated: str, owner_conn: asyncpg.Connection, service: str
) -> None:
    tables = await _tables(owner_conn)
    conn = await _connect_as(migrated, service)
    try:
        assert await conn.fetchval("SELECT current_user") == SERVICE_ROLES[service]
        found: dict[str, set[str]] = {}
        for table, column in tables.items():
            for privilege, statement in _attempts(table, column).items():
                if await _may(conn, statement):
                    found.setdefault(table, set()).add(privilege)
    finally:
        await conn.close()
    expected = {t: set(p) for t, p in granted(service).items() if t in tables}
    assert found == expected
    foreign = {t for t in found if owner_of(t) != service}
    assert foreign == set(), f"{SERVICE_ROLES[service]} reaches another owner's tables"
    own = {t for t in OWNED_TABLES[service] if t in tables}
    assert own <= set(found), "an owner cannot use its own tables"


@pytest.mark.parametrize("service", sorted(SERVICE_ROLES))
async def test_only_tool_exec_may_become_the_sql_reader(migrated: str, service: str) -> None:
    conn = await _connect_as(migrated, service)
    try:
        may = await _may(conn, f"SET LOCAL ROLE {SQL_READER}")
        assert may == (service in SQL_READER_MEMBERS)
        view = "SELECT id FROM weft_sql.documents LIMIT 0"
        if may:
            # The documented read-only path: the weft_sql views, no base table, no write.
            assert await _may(conn, view, as_reader=True)
            for statement in (
                "SELECT content FROM public.document_files LIMIT 0",
                "SELECT key_hash FROM public.api_keys LIMIT 0",
                "SELECT content FROM public.messages LIMIT 0",
                "DELETE FROM public.documents WHERE false",
                "INSERT INTO weft_sql.documents (id) VALUES ('x')",
            ):
                assert not await _may(conn, statement, as_reader=True), statement
        else:
            assert not await _may(conn, view)
    finally:
        await conn.close()


@pytest.mark.parametrize("service", sorted(SERVICE_ROLES))
async def test_a_service_role_cannot_change_the_schema(migrated: str, service: str) -> None:
    conn = await _connect_as(migrated, service)
    try:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("CREATE TABLE public.weft_intruder (id int)")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("ALTER TABLE public.sessions ADD COLUMN intruder int")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("TRUNCATE public.messages")
    finally:
        await conn.close()


@pytest.mark.parametrize("role", RETIRED_ROLES)
async def test_a_retired_role_left_by_an_earlier_release_reaches_no_table(
    migrated: str, owner_conn: asyncpg.Connection, role: str
) -> None:
    """An earlier release's role keeps nothing: a right it still holds (granted here, as the
    release that had it did) goes at the next grants run. deploy/local/infra.sh makes the
    role, as an upgraded cluster has it."""
    assert await owner_conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", role), (
        f"no {role} in this cluster: deploy/local/infra.sh creates it"
    )
    await owner_conn.execute(f'GRANT SELECT ON public.tenant_budgets TO "{role}"')
    engine = create_async_engine(migrated)
    try:
        async with engine.begin() as conn:  # under the lock every migration run holds
            await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK})
            await conn.run_sync(apply_grants)
    finally:
        await engine.dispose()
    reached = []
    for table in await _tables(owner_conn):
        query = "SELECT has_table_privilege($1, $2, 'SELECT,INSERT,UPDATE,DELETE')"
        if await owner_conn.fetchval(query, role, f'public."{table}"'):
            reached.append(table)
    assert reached == []
