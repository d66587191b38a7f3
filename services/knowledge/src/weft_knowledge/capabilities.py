"""What a knowledge base can do (SPEC A-07, A-08): the one derivation of its capabilities.

agent-config's guard (save time) and safety net (run time) read these through the KB
lookup route; the KB reads show them. Values are ``weft_tool_catalog.capabilities.
KBCapability`` values.
"""

from __future__ import annotations

from dataclasses import dataclass

from weft_tool_catalog.capabilities import KBCapability


@dataclass(frozen=True, kw_only=True)
class KBFacts:
    """What the derivation reads of one knowledge base."""

    kind: str = "documents"
    """``documents`` or ``faq`` (the FAQ branch adds the column; documents until then)."""
    wiki_enabled: bool = False
    graph_enabled: bool = False
    has_chunks: bool = False
    """At least one of its documents was cut into chunks."""
    has_embeddings: bool = False
    """At least one of its chunks has an embedding."""
    embeds: bool = True
    """The service embeds what it ingests (an embedding model is configured)."""


def kb_capabilities(facts: KBFacts) -> list[str]:
    """The capabilities of a knowledge base, sorted.

    A document KB offers ``keyword`` (each chunk is keyword-indexed as it is written) and
    ``vector`` once its chunks are embedded; an empty one is declared with what its first
    document will get, so that an agent can be set up before documents are uploaded. An
    FAQ KB offers ``faq`` and searches its entries by keyword and vector. ``wiki`` and
    ``graph`` follow the KB's switches.
    """
    found: set[KBCapability] = {KBCapability.KEYWORD}
    if facts.kind == "faq":
        found |= {KBCapability.FAQ, KBCapability.VECTOR}
    elif facts.has_embeddings or (facts.embeds and not facts.has_chunks):
        found.add(KBCapability.VECTOR)
    if facts.wiki_enabled:
        found.add(KBCapability.WIKI)
    if facts.graph_enabled:
        found.add(KBCapability.GRAPH)
    return sorted(c.value for c in found)
