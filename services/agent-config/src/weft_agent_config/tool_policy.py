"""Which tools an agent may use: ``allowed_tools`` rules (SPEC A-06), the runtime
registration steps (A-08) and the catalog the editor shows (A-07)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from enum import Enum
from typing import Any

from weft_contracts import AgentConfig
from weft_tool_catalog.catalog import (
    DEFAULT_ALLOWED_TOOLS,
    LEGACY_TOOL_NAMES,
    MANAGED_ELSEWHERE,
    tool_catalog,
)
from weft_tool_catalog.sandbox_specs import INSTALLER_TOOLS, SCRIPT_TOOLS
from weft_tool_catalog.wiki_specs import WIKI_WRITE_TOOLS

KNOWLEDGE_TOOLS: frozenset[str] = frozenset(
    {
        "search_knowledge",
        "read_document",
        "list_documents",
        "data_schema",
        "data_analysis",
        "query_knowledge_graph",
    }
)
"""Tools that only make sense with a knowledge-base scope (dropped for pure agents, A-08)."""

REFERENCE_TOOL_NAMES: frozenset[str] = frozenset(
    {
        "search_knowledge", "read_document", "list_documents", "search_conversations",
        "thinking", "todo_write", "database_query", "data_schema", "data_analysis",
        "query_knowledge_graph", "wiki_search", "wiki_read_page", "wiki_flag_issue",
        "wiki_write_page", "wiki_replace_text", "wiki_rename_page", "wiki_delete_page",
        "wiki_list_issues", "wiki_update_issue", "shell", "read_file", "write_file",
        "edit_file", "write_skill", "edit_skill",
    }
)  # fmt: skip
"""Built-in tool names of the engine we re-create; the catalog may not run all yet."""


class UnknownTool(ValueError):
    """``allowed_tools`` names a tool that does not exist (HTTP 400)."""


def known_tool_names() -> frozenset[str]:
    """Every name ``allowed_tools`` may contain after legacy mapping."""
    catalog = {entry.name for entry in tool_catalog()}
    return frozenset(catalog | REFERENCE_TOOL_NAMES | set(DEFAULT_ALLOWED_TOOLS))


def normalize_allowed_tools(names: list[str] | None) -> list[str]:
    """SPEC A-06: null -> the default list; ``[]`` stays empty; legacy names mapped to
    their successors; names managed elsewhere removed; unknown -> :class:`UnknownTool`."""
    if names is None:
        return list(DEFAULT_ALLOWED_TOOLS)
    known = known_tool_names()
    unknown = sorted(
        {n for n in names if LEGACY_TOOL_NAMES.get(n, n) not in known} - MANAGED_ELSEWHERE
    )
    if unknown:
        raise UnknownTool(f"unknown tools in allowed_tools: {unknown}")
    mapped = (LEGACY_TOOL_NAMES.get(n, n) for n in names)
    return _dedupe(n for n in mapped if n not in MANAGED_ELSEWHERE)


def missing_tools(allowed: list[str] | None) -> list[str]:
    """The tools of ``allowed`` that no worker runs yet: names of the reference engine
    (wiki, sandbox, skill tools) that ``allowed_tools`` accepts but the catalog lacks."""
    runnable = {entry.name for entry in tool_catalog()} | MANAGED_ELSEWHERE
    return [name for name in normalize_allowed_tools(allowed) if name not in runnable]


def runtime_tools(
    allowed: list[str] | None,
    *,
    has_kb_scope: bool,
    web_search: bool,
    memory: bool,
    sandbox: bool = False,
    skill_installer: bool = False,
) -> list[str]:
    """SPEC A-08 steps: effective allow-list; a pure agent (no KB scope) drops KB tools;
    script tools only with a sandbox (S-05), list_sandbox_files only without shell_exec
    (T-16), the skill-writing tools only for the skill installer (S-04); web tools
    injected when the agent and the request allow web; search_memory when the agent's
    memory is on; de-duplicated."""
    tools = normalize_allowed_tools(allowed)
    if not skill_installer:
        tools = [t for t in tools if t not in INSTALLER_TOOLS]
    if not has_kb_scope:
        tools = [t for t in tools if t not in KNOWLEDGE_TOOLS and not t.startswith("wiki_")]
    if not sandbox:
        tools = [t for t in tools if t not in SCRIPT_TOOLS]
    if "shell_exec" in tools:
        tools = [t for t in tools if t != "list_sandbox_files"]
    if web_search:
        tools += ["web_search", "web_fetch"]
    if memory:
        tools.append("search_memory")
    return _dedupe(tools)


def without_wiki_writes(config: AgentConfig) -> AgentConfig:
    """``config`` without the wiki write tools (SPEC A-08 step 1: a read-only or shared
    agent, or no writable wiki in scope)."""
    tools = [t for t in config.allowed_tools if t not in WIKI_WRITE_TOOLS]
    approval = config.approval.model_copy(
        update={"always_ask": [t for t in config.approval.always_ask if t in tools]}
    )
    return config.model_copy(update={"allowed_tools": tools, "approval": approval})


def catalog_json() -> list[dict[str, Any]]:
    """``GET /agents/tools``: every catalog entry with its capability fields as JSON."""
    return [_jsonable(dataclasses.asdict(entry)) for entry in tool_catalog()]


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(_jsonable(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    return value


def _dedupe(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))
