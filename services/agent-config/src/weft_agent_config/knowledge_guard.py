"""Knowledge bases of a turn or an agent: their names for the ``{{knowledge_bases}}``
placeholder, the backend guard of SPEC A-07 (KBs incompatible with the tools' capability
requirements are refused with a reason naming the KB and the missing capability) and the
run-time safety net of A-08 (a tool whose capability no KB in scope offers is dropped).

The knowledge service says what each KB offers (``weft_knowledge.capabilities.
kb_capabilities``, the one derivation: vector, keyword, wiki, graph, faq);
:func:`capabilities_of` reads its answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from weft_contracts import KnowledgeBaseInfo
from weft_tool_catalog.capabilities import KBCapability, ToolRequirement
from weft_tool_catalog.catalog import tool_catalog

from weft_agent_config.knowledge_client import KnowledgeService

DOCUMENT_KB = frozenset({KBCapability.VECTOR, KBCapability.KEYWORD})
"""What a document KB with embedded chunks offers (tests and the editor's examples)."""

REFERENCE_REQUIREMENTS: dict[str, ToolRequirement] = {
    "wiki_search": ToolRequirement(any_of=frozenset({KBCapability.WIKI})),
    "wiki_read_page": ToolRequirement(any_of=frozenset({KBCapability.WIKI})),
    "wiki_flag_issue": ToolRequirement(any_of=frozenset({KBCapability.WIKI}), auxiliary=True),
    "wiki_write_page": ToolRequirement(any_of=frozenset({KBCapability.WIKI})),
    "wiki_replace_text": ToolRequirement(any_of=frozenset({KBCapability.WIKI})),
    "wiki_rename_page": ToolRequirement(any_of=frozenset({KBCapability.WIKI})),
    "wiki_delete_page": ToolRequirement(any_of=frozenset({KBCapability.WIKI})),
    "wiki_list_issues": ToolRequirement(any_of=frozenset({KBCapability.WIKI}), auxiliary=True),
    "wiki_update_issue": ToolRequirement(any_of=frozenset({KBCapability.WIKI}), auxiliary=True),
}
"""Requirements of reference tools ``allowed_tools`` accepts that the registry does not
run yet (the registry's own specs win for every tool it has)."""


class UnknownKnowledgeBase(LookupError):
    """A knowledge base id that is not the tenant's (HTTP 400 on save, 404 on chat)."""


class IncompatibleKnowledgeBase(ValueError):
    """A knowledge base cannot serve the agent's tools (HTTP 400, SPEC A-07)."""


@dataclass(frozen=True)
class ScopedKnowledgeBase:
    """A knowledge base with what it can do."""

    info: KnowledgeBaseInfo
    capabilities: frozenset[KBCapability]


def capabilities_of(kb: dict[str, Any]) -> frozenset[KBCapability]:
    """What a knowledge base offers, as knowledge described it (a capability this
    agent-config does not know is left out: no tool of its catalog needs it)."""
    known = {c.value: c for c in KBCapability}
    return frozenset(known[c] for c in kb.get("capabilities", []) if c in known)


def tool_requirements(tools: Iterable[str]) -> dict[str, ToolRequirement]:
    """Requirements of the tools that need knowledge bases at all."""
    known = {entry.name: entry.requirement for entry in tool_catalog()}
    found = {name: known.get(name) or REFERENCE_REQUIREMENTS.get(name) for name in tools}
    return {n: r for n, r in found.items() if r is not None and (r.any_of or r.all_of)}


def missing_capabilities(
    tools: Iterable[str], capabilities: Iterable[KBCapability]
) -> dict[str, list[str]] | None:
    """None when a KB offering ``capabilities`` serves the tools, else what each tool lacks.

    A KB must satisfy at least one primary (non-auxiliary) tool that needs KBs; auxiliary
    tools (read_document, list_documents) count only when no primary tool needs KBs.
    Tools that need no KB never make a KB incompatible.
    """
    needs = tool_requirements(tools)
    primary = {n: r for n, r in needs.items() if not r.auxiliary} or needs
    if not primary or any(r.satisfied_by(capabilities) for r in primary.values()):
        return None
    offered = set(capabilities)
    return {name: _lacking(req, offered) for name, req in sorted(primary.items())}


def _lacking(req: ToolRequirement, offered: set[KBCapability]) -> list[str]:
    lacking = set(req.all_of - offered)
    if req.any_of and not req.any_of & offered:
        lacking |= req.any_of
    return sorted(c.value for c in lacking)


def check_compatible(tools: Sequence[str], kbs: Sequence[ScopedKnowledgeBase]) -> None:
    """SPEC A-07 backend guard: raise :class:`IncompatibleKnowledgeBase` naming the first
    incompatible KB and the capability it lacks."""
    for kb in kbs:
        lacking = missing_capabilities(tools, kb.capabilities)
        if lacking is None:
            continue
        needed = sorted({c for caps in lacking.values() for c in caps})
        offered = sorted(c.value for c in kb.capabilities) or ["none"]
        raise IncompatibleKnowledgeBase(
            f"knowledge base {kb.info.id!r} ({kb.info.name}) lacks the capability "
            f"{' or '.join(needed)} required by {', '.join(lacking)}; "
            f"it offers {', '.join(offered)}"
        )


def capable_tools(tools: Sequence[str], kbs: Sequence[ScopedKnowledgeBase]) -> list[str]:
    """SPEC A-08 step 4, the safety net: ``tools`` without those whose capability no KB
    of the scope offers (no graph in scope: no ``query_knowledge_graph``), the others
    kept in order. A scope without any KB (a tenant with none yet) drops nothing: the
    KB tools then tell the model that nothing is indexed."""
    if not kbs:
        return list(tools)
    offered: frozenset[KBCapability] = frozenset().union(*(kb.capabilities for kb in kbs))
    needs = tool_requirements(tools)
    return [t for t in tools if t not in needs or needs[t].satisfied_by(offered)]


class KnowledgeDirectory:
    """A tenant's knowledge bases, asked of the knowledge service (every call carries the
    tenant, invariant 5)."""

    def __init__(self, knowledge: KnowledgeService):
        self._knowledge = knowledge

    async def scoped(
        self, tenant_id: str, kb_ids: Sequence[str], *, limit: int = 100
    ) -> list[ScopedKnowledgeBase]:
        """The tenant's KBs ``kb_ids`` in that order (the tenant's first ``limit`` KBs
        when empty); an id that is not the tenant's raises :class:`UnknownKnowledgeBase`."""
        found, missing = await self._knowledge.knowledge_bases(tenant_id, list(kb_ids), limit)
        if missing is not None:
            raise UnknownKnowledgeBase(missing)
        return [
            ScopedKnowledgeBase(
                KnowledgeBaseInfo(id=r["id"], name=r["name"], description=r["description"]),
                capabilities_of(r),
            )
            for r in found
        ]
