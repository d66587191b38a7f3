"""Which service owns which table (``docs/architecture.md``, "Data ownership").

Only a table's owner writes it; any other service asks the owner over internal HTTP or
learns it from the owner's events. This map is the single source: each owner's purge
covers its own tables, and the database grants follow from it.
"""

from __future__ import annotations

from typing import Final

OWNERS: Final[dict[str, tuple[str, ...]]] = {
    "gateway": ("tenants", "api_keys", "admin_audit", "tenant_budgets"),
    "agent-config": (
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
}
"""Owning service -> the tables it alone writes. The engine and tool-exec own none."""

MIGRATIONS_ONLY: Final[frozenset[str]] = frozenset({"alembic_version"})
"""Tables no service touches at run time."""


def owner_of(table: str) -> str:
    """The service that owns ``table``; KeyError for a table nobody owns."""
    for owner, tables in OWNERS.items():
        if table in tables:
            return owner
    raise KeyError(table)
