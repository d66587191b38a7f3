"""The tool catalog agent-config exposes, and the tool-name rules of SPEC A-06.

Built from the same specs the registry executes, so the catalog can never list a tool the
workers do not have.
"""

from __future__ import annotations

from dataclasses import dataclass

from weft_tool_catalog.capabilities import ToolRequirement
from weft_tool_catalog.specs import OFFERABLE_SPECS

DEFAULT_ALLOWED_TOOLS: tuple[str, ...] = (
    "search_knowledge",
    "read_document",
    "list_documents",
    "search_conversations",
)
"""``allowed_tools`` null/unset means these (SPEC A-06)."""

LEGACY_TOOL_NAMES: dict[str, str] = {
    "knowledge_search": "search_knowledge",
    "grep_chunks": "search_knowledge",
    "list_knowledge_chunks": "read_document",
    "get_document_info": "read_document",
    "wiki_read_source_doc": "read_document",
    "wiki_list_issues": "wiki_read_issue",
}
"""Old names accepted in ``allowed_tools`` and mapped to their successors (SPEC A-06)."""

MANAGED_ELSEWHERE: frozenset[str] = frozenset({"web_search", "web_fetch", "search_memory"})
"""Removed from ``allowed_tools`` and re-injected by their own switches (SPEC A-06)."""


@dataclass(frozen=True, kw_only=True)
class ToolCatalogEntry:
    """One tool as the agent editor shows it."""

    name: str
    description: str
    read_only: bool
    requirement: ToolRequirement
    """Knowledge-base capabilities the tool needs (SPEC A-07)."""


def tool_catalog() -> list[ToolCatalogEntry]:
    """Every built-in and sandbox tool, sorted by name."""
    return [
        ToolCatalogEntry(
            name=s.name, description=s.description, read_only=s.read_only, requirement=s.requirement
        )
        for s in sorted(OFFERABLE_SPECS, key=lambda s: s.name)
    ]
