"""The services' PostgreSQL roles and grants, applied from ``weft_storage.ownership``.

Run by the migration owner role: ``ensure_roles`` (migration ``0023_service_roles`` and
every upgrade) creates missing service roles when it may (CREATEROLE), ``apply_grants``
(every upgrade, ``migrations/env.py``) makes each role's table rights exactly those of
the map, and ``set_passwords`` (``python -m weft_storage.migrate upgrade`` given the
services' URLs) keeps each role's password equal to the one in its service's URL.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.engine.url import make_url

from weft_storage.ownership import (
    RETIRED_ROLES,
    SERVICE_ROLES,
    SQL_READER,
    SQL_READER_MEMBERS,
    granted,
)


class RolesMissing(RuntimeError):
    """Service roles are missing and the migration role may not create them."""


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def may_create_roles(conn: Connection) -> bool:
    """Whether the connected role has CREATEROLE (or is a superuser)."""
    return bool(
        conn.execute(
            text("SELECT rolcreaterole OR rolsuper FROM pg_roles WHERE rolname = current_user")
        ).scalar()
    )


def _existing(conn: Connection) -> set[str]:
    query = text("SELECT rolname FROM pg_roles WHERE rolname = ANY(:r)")
    return set(conn.execute(query, {"r": list(SERVICE_ROLES.values())}).scalars().all())


def ensure_roles(conn: Connection) -> None:
    """Create the service roles (LOGIN, no password yet) that do not exist; raise
    :class:`RolesMissing` naming what a DBA must create when this role may not."""
    missing = sorted(set(SERVICE_ROLES.values()) - _existing(conn))
    if not missing:
        return
    if not may_create_roles(conn):
        statements = " ".join(f"CREATE ROLE {r} LOGIN PASSWORD '...';" for r in missing)
        raise RolesMissing(
            f"service roles {', '.join(missing)} are missing and the migration role may not "
            f"create them (no CREATEROLE). As a superuser: {statements} "
            f"ALTER ROLE weft_tool_exec NOINHERIT; GRANT {SQL_READER} TO weft_tool_exec; "
            "then migrate again (docs/operations.md)"
        )
    readers = {SERVICE_ROLES[s] for s in SQL_READER_MEMBERS}
    for role in missing:
        # A reader member must not inherit: the reader's row-level security would apply
        # to it as itself too (and show it no row of the knowledge tables).
        inherit = "NOINHERIT" if role in readers else "INHERIT"
        conn.execute(text(f"CREATE ROLE {_ident(role)} LOGIN {inherit}"))


def apply_grants(conn: Connection) -> None:
    """Make every existing service role's rights on the public tables exactly those of
    the ownership map (revoke all, then grant, in the caller's transaction)."""
    tables = set(
        conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'"))
        .scalars()
        .all()
    )
    roles = _existing(conn)
    _revoke_retired(conn, tables)
    for service, role in SERVICE_ROLES.items():
        if role not in roles:
            continue
        r = _ident(role)
        conn.execute(text(f"GRANT USAGE ON SCHEMA public TO {r}"))
        if tables:
            every = ", ".join(_ident(t) for t in sorted(tables))
            conn.execute(text(f"REVOKE ALL ON TABLE {every} FROM {r}"))
        conn.execute(text(f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {r}"))
        rights = {t: p for t, p in granted(service).items() if t in tables}
        for table, privileges in sorted(rights.items()):
            conn.execute(text(f"GRANT {', '.join(sorted(privileges))} ON {_ident(table)} TO {r}"))
        for seq in _sequences(conn, [t for t, p in rights.items() if "INSERT" in p]):
            conn.execute(text(f"GRANT USAGE ON SEQUENCE {_ident(seq)} TO {r}"))
    _reader_membership(conn, roles)


def _revoke_retired(conn: Connection, tables: set[str]) -> None:
    """Take every right on the public tables and sequences from the retired roles that
    still exist (an upgraded database kept their grants; nothing re-grants them)."""
    query = text("SELECT rolname FROM pg_roles WHERE rolname = ANY(:r)")
    for role in sorted(conn.execute(query, {"r": list(RETIRED_ROLES)}).scalars().all()):
        r = _ident(role)
        if tables:
            every = ", ".join(_ident(t) for t in sorted(tables))
            conn.execute(text(f"REVOKE ALL ON TABLE {every} FROM {r}"))
        conn.execute(text(f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {r}"))


def _sequences(conn: Connection, tables: list[str]) -> list[str]:
    """The sequences behind serial/identity columns of ``tables``."""
    if not tables:
        return []
    query = text(
        "SELECT DISTINCT s.relname FROM pg_class s "
        "JOIN pg_depend d ON d.objid = s.oid AND d.deptype IN ('a', 'i') "
        "JOIN pg_class t ON t.oid = d.refobjid "
        "JOIN pg_namespace n ON n.oid = t.relnamespace "
        "WHERE s.relkind = 'S' AND n.nspname = 'public' AND t.relname = ANY(:tables) "
        "ORDER BY 1"
    )
    return list(conn.execute(query, {"tables": tables}).scalars().all())


def _reader_membership(conn: Connection, roles: set[str]) -> None:
    """The ``SQL_READER_MEMBERS`` roles are NOINHERIT members of the reader, so they may
    SET ROLE to it (granted here when this role may, else a DBA must: the error says
    what)."""
    for service in SQL_READER_MEMBERS:
        role = SERVICE_ROLES[service]
        if role not in roles:
            continue
        inherits = conn.execute(
            text("SELECT rolinherit FROM pg_roles WHERE rolname = :r"), {"r": role}
        ).scalar()
        if inherits:
            # Inheriting the reader, the role would be under the reader's row-level
            # security as itself too (docs/operations.md, "Database roles").
            if not may_create_roles(conn):
                raise RolesMissing(
                    f"{role} must be NOINHERIT (it is a member of {SQL_READER}) and the "
                    f"migration role may not alter it. As a superuser: ALTER ROLE {role} "
                    "NOINHERIT; then migrate again"
                )
            conn.execute(text(f"ALTER ROLE {_ident(role)} NOINHERIT"))
        query = text("SELECT pg_has_role(:r, :reader, 'MEMBER')")
        if conn.execute(query, {"r": role, "reader": SQL_READER}).scalar():
            continue
        admin = conn.execute(
            text("SELECT pg_has_role(current_user, :reader, 'MEMBER WITH ADMIN OPTION')"),
            {"reader": SQL_READER},
        ).scalar()
        if not (admin or may_create_roles(conn)):
            raise RolesMissing(
                f"{role} is not a member of {SQL_READER} and the migration role may not "
                f"grant it. As a superuser: GRANT {SQL_READER} TO {role}; then migrate again"
            )
        conn.execute(text(f"GRANT {_ident(SQL_READER)} TO {_ident(role)}"))


def set_passwords(conn: Connection, urls: Mapping[str, str]) -> list[str]:
    """Set each service role's password to the one in its URL (service -> URL) when
    this role may (CREATEROLE); the services whose password it could not set (a DBA
    keeps those in step with the URLs). A URL for another user is refused."""
    skipped = []
    allowed = may_create_roles(conn)
    for service, url in sorted(urls.items()):
        parsed = make_url(url)
        role = SERVICE_ROLES[service]
        if parsed.username != role:
            raise ValueError(f"the database URL of {service} must log in as {role}")
        if parsed.password is None:
            continue
        if not allowed:
            skipped.append(service)
            continue
        password = _literal(str(parsed.password))
        # Not text(): a ':' in the password would read as a bind parameter.
        conn.exec_driver_sql(f"ALTER ROLE {_ident(role)} LOGIN PASSWORD {password}")
    return skipped
