"""Knowledge-base capabilities each tool needs (SPEC A-07).

Mirrors the reference's ``ToolCapabilityRequirements``: a tool is usable with a set of
knowledge bases when they offer all of ``all_of`` and at least one of ``any_of``. The
agent editor derives its KB filter from these; the backend guard rejects incompatible KBs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class KBCapability(StrEnum):
    """What a knowledge base can do."""

    VECTOR = "vector"
    KEYWORD = "keyword"
    WIKI = "wiki"
    GRAPH = "graph"
    FAQ = "faq"


@dataclass(frozen=True, kw_only=True)
class ToolRequirement:
    """Capabilities a tool needs from the knowledge bases in scope."""

    any_of: frozenset[KBCapability] = frozenset()
    all_of: frozenset[KBCapability] = frozenset()
    auxiliary: bool = False
    """Useful only next to a primary retrieval tool (read_document, list_documents)."""
    consumes_files: bool = False
    """The tool reads uploaded files, so the input box offers ``@file``."""

    def satisfied_by(self, capabilities: Iterable[KBCapability]) -> bool:
        """Whether knowledge bases offering ``capabilities`` can serve this tool."""
        offered = set(capabilities)
        if not self.all_of <= offered:
            return False
        return not self.any_of or bool(self.any_of & offered)


NO_REQUIREMENT = ToolRequirement()
RETRIEVAL = ToolRequirement(
    any_of=frozenset({KBCapability.VECTOR, KBCapability.KEYWORD}), consumes_files=True
)
DOCUMENT_READER = ToolRequirement(
    any_of=frozenset({KBCapability.VECTOR, KBCapability.KEYWORD, KBCapability.WIKI}),
    auxiliary=True,
)
GRAPH_QUERY = ToolRequirement(all_of=frozenset({KBCapability.GRAPH}), consumes_files=True)
"""``query_knowledge_graph``: a knowledge graph in scope (SPEC T-10)."""
