"""What a knowledge base offers and what a turn keeps of its tools (SPEC A-07, A-08):
knowledge's one derivation, agent-config's save-time guard and run-time safety net, and
the ``query_knowledge_graph`` spec's requirement."""

from __future__ import annotations

import pytest
from weft_agent_config.knowledge_guard import (
    IncompatibleKnowledgeBase,
    ScopedKnowledgeBase,
    capabilities_of,
    capable_tools,
    check_compatible,
)
from weft_agent_config.tool_policy import runtime_tools
from weft_contracts import KnowledgeBaseInfo
from weft_knowledge.capabilities import KBFacts, kb_capabilities
from weft_tool_catalog.capabilities import KBCapability
from weft_tool_catalog.specs import QUERY_KNOWLEDGE_GRAPH, argument_problems


def _kb(kb_id: str, facts: KBFacts) -> ScopedKnowledgeBase:
    caps = capabilities_of({"capabilities": kb_capabilities(facts)})
    return ScopedKnowledgeBase(KnowledgeBaseInfo(id=kb_id, name=kb_id), caps)


DOCS = KBFacts(has_chunks=True, has_embeddings=True)
GRAPH = KBFacts(has_chunks=True, has_embeddings=True, graph_enabled=True)


def test_the_derivation_reads_the_kb_and_its_chunks() -> None:  # SPEC A-07
    assert kb_capabilities(DOCS) == ["keyword", "vector"]
    assert kb_capabilities(GRAPH) == ["graph", "keyword", "vector"]
    # chunks without embeddings (no embedding model, or it failed): keyword only
    assert kb_capabilities(KBFacts(has_chunks=True, embeds=False)) == ["keyword"]
    assert kb_capabilities(KBFacts(has_chunks=True, embeds=True)) == ["keyword"]
    # an empty KB is declared with what its first document will get
    assert kb_capabilities(KBFacts()) == ["keyword", "vector"]
    assert kb_capabilities(KBFacts(embeds=False)) == ["keyword"]
    assert kb_capabilities(KBFacts(kind="faq")) == ["faq", "keyword", "vector"]
    assert kb_capabilities(KBFacts(wiki_enabled=True, embeds=False)) == ["keyword", "wiki"]
    # agent-config leaves out a capability its catalog does not know
    assert capabilities_of({"capabilities": ["graph", "telepathy"]}) == {KBCapability.GRAPH}


def test_the_guard_refuses_a_kb_without_a_graph_for_a_graph_only_agent() -> None:
    check_compatible(["query_knowledge_graph"], [_kb("kb_g", GRAPH)])
    with pytest.raises(IncompatibleKnowledgeBase, match="lacks the capability graph"):
        check_compatible(["query_knowledge_graph"], [_kb("kb_d", DOCS)])
    # one primary tool the KB serves is enough: a hybrid agent keeps a document KB
    check_compatible(["search_knowledge", "query_knowledge_graph"], [_kb("kb_d", DOCS)])


def test_the_safety_net_drops_only_what_no_kb_in_scope_serves() -> None:  # SPEC A-08 step 4
    tools = ["search_knowledge", "query_knowledge_graph", "read_document", "thinking"]
    assert capable_tools(tools, [_kb("kb_d", DOCS)]) == [
        "search_knowledge", "read_document", "thinking",
    ]  # fmt: skip
    assert capable_tools(tools, [_kb("kb_d", DOCS), _kb("kb_g", GRAPH)]) == tools
    # a keyword-only KB still serves search_knowledge (any_of vector, keyword)
    assert capable_tools(tools, [_kb("kb_k", KBFacts(has_chunks=True, embeds=False))]) == [
        "search_knowledge", "read_document", "thinking",
    ]  # fmt: skip
    assert capable_tools(tools, []) == tools  # a tenant without KBs: tools say so


def test_a_pure_agent_never_gets_the_graph_tool() -> None:  # SPEC A-08 step 2
    allowed = ["query_knowledge_graph", "thinking"]
    assert runtime_tools(allowed, has_kb_scope=False, web_search=False, memory=False) == [
        "thinking"
    ]
    assert "query_knowledge_graph" in runtime_tools(
        allowed, has_kb_scope=True, web_search=False, memory=False
    )


def test_graph_query_arguments_are_bounded() -> None:  # SPEC T-10, hostile inputs
    assert QUERY_KNOWLEDGE_GRAPH.requirement.all_of == {KBCapability.GRAPH}
    ok = {"knowledge_base_ids": ["b1"], "query": "Acme"}
    assert argument_problems("query_knowledge_graph", ok) is None
    bad = [
        {"knowledge_base_ids": [], "query": "Acme"},
        {"knowledge_base_ids": [f"b{i}" for i in range(11)], "query": "Acme"},
        {"knowledge_base_ids": ["b1"], "query": "x" * 1001},
        {"knowledge_base_ids": ["b1"], "query": ""},
        {"knowledge_base_ids": ["x" * 65], "query": "Acme"},
        {"query": "Acme"},
    ]
    for args in bad:
        assert argument_problems("query_knowledge_graph", args) is not None, args
