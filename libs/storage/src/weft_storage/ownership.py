"""Who owns which table, and the PostgreSQL role each service connects as.

Every public table has exactly one owner (docs/architecture.md, "Data ownership"). Each
service connects as its own role (``SERVICE_ROLES``) and gets SELECT, INSERT, UPDATE and
DELETE on its own tables (and USAGE on their sequences) only. The migration owner role
(``weft`` locally) owns every table and is never used by a service at run time.

``weft_storage.roles.apply_grants`` derives the grants from this map and re-applies them after every
``weft_storage.migrate upgrade`` (a table added later gets its grants; a grant no longer
in the map is revoked). A table of the migrated database with no owner here fails
``tests/integration/test_table_owners.py``.

``TRANSITIONAL_GRANTS`` lists the cross-owner reads and writes today's code still makes;
each entry names the path that removes it. Delete an entry when its path lands:
``tests/security/test_database_roles.py`` then checks the stricter state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sqlalchemy.engine.url import make_url

ALL = ("SELECT", "INSERT", "UPDATE", "DELETE")
"""What an owner may do with its tables."""

SQL_READER = "weft_sql_reader"
"""The role ``database_query`` switches to (migration ``0007_sql_reader``): it reads only
the ``weft_sql`` views, whose rows row-level security limits to the turn's tenant and
knowledge bases."""

SERVICE_ROLES: Mapping[str, str] = {
    "gateway": "weft_gateway",
    "agent_config": "weft_agent_config",
    "memory": "weft_memory",
    "knowledge": "weft_knowledge",
    "sandbox": "weft_sandbox",
    "suggestions": "weft_suggestions",
    "tool_exec": "weft_tool_exec",
    # TRANSITIONAL: the engine opens no database once its budget comes with the turn
    # (paths helper); until then it reads ``tenant_budgets`` (TRANSITIONAL_GRANTS).
    "engine": "weft_engine",
}
"""Service (the package name without ``weft_``) -> the PostgreSQL role it connects as."""

OWNED_TABLES: Mapping[str, tuple[str, ...]] = {
    "gateway": ("tenants", "api_keys", "admin_audit", "tenant_budgets"),
    "agent_config": (
        "agents",
        "agent_shares",
        "organisations",
        "organisation_members",
        "shared_agent_settings",
        "skill_packages",
        "mcp_servers",
        "mcp_server_tools",
        "mcp_oauth_clients",
        "mcp_oauth_states",
        "mcp_user_tokens",
    ),
    "memory": (
        "sessions",
        "messages",
        "memories",
        "memory_extractions",
        "usage",
        "agent_prompts",
        "approval_decisions",
        "agent_grants",
        "agent_run_suspensions",
    ),
    "knowledge": ("knowledge_bases", "documents", "document_files", "chunks"),
    "sandbox": ("sandbox_checkpoints",),
    "suggestions": ("suggestion_turns", "message_suggestion_sets", "suggestion_events"),
    "tool_exec": (),
    "engine": (),
}
"""Owner -> its tables. Tables not in the database yet are skipped when granting."""

TABLE_PRIVILEGES: Mapping[str, tuple[str, ...]] = {
    # Append-only (migration 0010's triggers refuse UPDATE, DELETE and TRUNCATE anyway).
    "admin_audit": ("SELECT", "INSERT"),
}
"""Tables whose owner gets less than :data:`ALL`."""

SQL_READER_MEMBERS: tuple[str, ...] = ("tool_exec",)
"""Services whose role may ``SET ROLE weft_sql_reader`` (``database_query``); they read
the ``weft_sql`` views only through that role."""

UNOWNED_TABLES: tuple[str, ...] = ("alembic_version",)
"""Public tables only the migration owner uses."""


@dataclass(frozen=True)
class TransitionalGrant:
    """A cross-owner right today's code still needs, and the path that removes it."""

    service: str
    table: str
    privileges: tuple[str, ...]
    removed_by: str


_KNOWLEDGE = "knowledge service (gateway and tool-exec ask services/knowledge)"
_KNOWLEDGE_ASK = "knowledge service (agent-config and the gateway ask knowledge)"
_SESSION_OWNER = "session_owner via memory"
_KNOWLEDGE_TABLES = OWNED_TABLES["knowledge"]


def _each(
    service: str, tables: Iterable[str], privileges: tuple[str, ...], removed_by: str
) -> tuple[TransitionalGrant, ...]:
    return tuple(TransitionalGrant(service, t, privileges, removed_by) for t in tables)


TRANSITIONAL_GRANTS: tuple[TransitionalGrant, ...] = (
    # gateway: knowledge routes, question origin, ingestion queue (knowledge service)
    *_each("gateway", _KNOWLEDGE_TABLES, ALL, _KNOWLEDGE),
    # gateway: usage records of uploaded documents (knowledge, then via memory)
    TransitionalGrant("gateway", "usage", ("SELECT", "INSERT", "UPDATE"), _KNOWLEDGE),
    # gateway: skill uploads (go through agent-config)
    TransitionalGrant("gateway", "skill_packages", ALL, "skill uploads via agent-config"),
    # gateway: admin usage routes (go through memory)
    TransitionalGrant("gateway", "usage", ("SELECT",), "admin usage via memory"),
    # agent-config: knowledge_guard and suggestion_settings read bases and documents
    *_each("agent_config", ("knowledge_bases", "documents"), ("SELECT",), _KNOWLEDGE_ASK),
    # memory: fork and rollback copy the sandbox's checkpoints
    TransitionalGrant("memory", "sandbox_checkpoints", ALL, "fork/rollback ask the sandbox"),
    # sandbox: skill package reads (go through agent-config)
    TransitionalGrant("sandbox", "skill_packages", ("SELECT",), "skill reads via agent-config"),
    # sandbox, suggestions: session_owner (asks memory)
    TransitionalGrant("sandbox", "sessions", ("SELECT",), _SESSION_OWNER),
    TransitionalGrant("suggestions", "sessions", ("SELECT",), _SESSION_OWNER),
    # tool-exec: knowledge tools and ingestion workers (knowledge service)
    *_each("tool_exec", _KNOWLEDGE_TABLES, ALL, _KNOWLEDGE),
    # tool-exec: usage records of ingested documents (knowledge, then via memory)
    TransitionalGrant("tool_exec", "usage", ("SELECT", "INSERT", "UPDATE"), _KNOWLEDGE),
    # engine: the tenant's budget override (comes with the turn)
    TransitionalGrant("engine", "tenant_budgets", ("SELECT",), "budget with the turn"),
)
"""TRANSITIONAL: cross-owner rights of today's code; the lead deletes each entry when the
path named in ``removed_by`` lands (docs/architecture.md, "Data ownership")."""


def owner_of(table: str) -> str | None:
    """The service owning ``table``; None if no service does."""
    for service, tables in OWNED_TABLES.items():
        if table in tables:
            return service
    return None


def role_of(service: str) -> str:
    """The PostgreSQL role ``service`` connects as (``KeyError`` for an unknown one)."""
    return SERVICE_ROLES[service]


def granted(service: str, *, transitional: bool = True) -> dict[str, frozenset[str]]:
    """Table -> privileges ``service``'s role gets: its own tables, plus (unless
    ``transitional`` is false) its transitional grants."""
    rights: dict[str, set[str]] = {
        t: set(TABLE_PRIVILEGES.get(t, ALL)) for t in OWNED_TABLES.get(service, ())
    }
    if transitional:
        for grant in TRANSITIONAL_GRANTS:
            if grant.service == service:
                rights.setdefault(grant.table, set()).update(grant.privileges)
    return {t: frozenset(p) for t, p in rights.items()}


def service_url(owner_url: str, service: str, password: str | None = None) -> str:
    """``owner_url`` with ``service``'s role as the user (and ``password``, default: the
    role's name, the local development scheme of deploy/local/infra.sh)."""
    role = role_of(service)
    url = make_url(owner_url).set(username=role, password=password or role)
    return url.render_as_string(hide_password=False)


OWNERS: Mapping[str, tuple[str, ...]] = {
    service.replace("_", "-"): tables for service, tables in OWNED_TABLES.items() if tables
}
"""The owners of tenant data by service name (``agent-config``, as its URLs and logs say)
-> their tables: whom a tenant purge asks (``weft_storage.owner_purge``)."""
