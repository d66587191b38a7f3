"""The registry with Weft's built-in tools, and their specs alone for the engine."""

from __future__ import annotations

from weft_storage.knowledge import KnowledgeStore

from weft_tools.knowledge_tools import SEARCH_KNOWLEDGE, SearchKnowledgeTool
from weft_tools.registry import ToolRegistry, ToolSpec

BUILTIN_SPECS: tuple[ToolSpec, ...] = (SEARCH_KNOWLEDGE,)
"""Specs of every built-in tool (what the engine sends the model)."""

SANDBOX_TOOLS: frozenset[str] = frozenset({"shell_exec", "read_file", "write_sandbox_file"})
"""Tools routed to ``sandbox.calls`` instead of ``tool.calls``."""


def builtin_registry(store: KnowledgeStore) -> ToolRegistry:
    """A registry holding every built-in tool, ready to execute."""
    registry = ToolRegistry()
    registry.register(SearchKnowledgeTool(store))
    return registry


def spec_by_name(name: str) -> ToolSpec | None:
    """The built-in spec named ``name``."""
    return next((s for s in BUILTIN_SPECS if s.name == name), None)


def definitions_for(allowed: list[str]) -> list[dict[str, object]]:
    """OpenAI tool definitions of the allowed built-ins, sorted by name (SPEC T-01)."""
    return [
        s.definition() for s in sorted(BUILTIN_SPECS, key=lambda s: s.name) if s.name in allowed
    ]
