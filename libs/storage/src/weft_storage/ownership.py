"""Who owns which table, and the PostgreSQL role each service connects as.

Every public table has exactly one owner (docs/architecture.md, "Data ownership"). Each
service connects as its own role (``SERVICE_ROLES``) and gets SELECT, INSERT, UPDATE and
DELETE on its own tables (and USAGE on their sequences) only. The migration owner role
(``weft`` locally) owns every table and is never used by a service at run time.

``weft_storage.roles.apply_grants`` derives the grants from this map and re-applies them after every
``weft_storage.migrate upgrade`` (a table added later gets its grants; a grant no longer
in the map is revoked). A table of the migrated database with no owner here fails
``tests/integration/test_table_owners.py``.

No service holds a right on another owner's table: a service that needs another owner's
data asks that owner over HTTP (``tests/security/test_database_roles.py`` checks each
role's rights are exactly its own tables'). The engine keeps its state in Redis and has
no role.
"""

from __future__ import annotations

from collections.abc import Mapping

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
}
"""Service (the package name without ``weft_``) -> the PostgreSQL role it connects as."""

RETIRED_ROLES: tuple[str, ...] = ("weft_engine",)
"""Roles of earlier releases no service connects as any more (the engine's, from before
its budget came with the turn): every upgrade revokes their rights on the public tables,
and an operator may drop them (docs/deploy.md, "Database roles")."""

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
    "knowledge": (
        "knowledge_bases",
        "documents",
        "document_files",
        "chunks",
        "faq_entries",
        "faq_embedding_jobs",
        "graph_entities",
        "graph_relations",
        "graph_mentions",
        "graph_extractions",
        "wiki_pages",
        "wiki_page_revisions",
        "wiki_links",
        "wiki_issues",
        "wiki_generations",
    ),
    "sandbox": ("sandbox_checkpoints",),
    "suggestions": ("suggestion_turns", "message_suggestion_sets", "suggestion_events"),
    "tool_exec": (),
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


def owner_of(table: str) -> str | None:
    """The service owning ``table``; None if no service does."""
    for service, tables in OWNED_TABLES.items():
        if table in tables:
            return service
    return None


def role_of(service: str) -> str:
    """The PostgreSQL role ``service`` connects as (``KeyError`` for an unknown one)."""
    return SERVICE_ROLES[service]


def granted(service: str) -> dict[str, frozenset[str]]:
    """Table -> privileges ``service``'s role gets: its own tables, nothing else."""
    return {t: frozenset(TABLE_PRIVILEGES.get(t, ALL)) for t in OWNED_TABLES.get(service, ())}


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

OWNED: frozenset[str] = frozenset(t for tables in OWNED_TABLES.values() for t in tables)
"""Every table some service owns (``UNOWNED_TABLES`` aside, the whole schema)."""
