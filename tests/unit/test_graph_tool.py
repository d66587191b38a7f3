"""``query_knowledge_graph`` as the model reads it (SPEC T-10, E-22): per-KB blocks with
relations and their source passages first, then text hits, a failed KB as ``<error>``,
handles only, and the output budget."""

from __future__ import annotations

import json
from typing import Any

import httpx
from weft_contracts import ToolContext
from weft_tool_catalog.registry import ToolInvocation, ToolRegistry
from weft_tools.aliases import MemoryAliasBook
from weft_tools.graph_tools import QueryKnowledgeGraphTool
from weft_tools.knowledge_client import KnowledgeClient
from weft_tools.knowledge_scope import KnowledgeScope


def _hit(chunk: str, content: str) -> dict[str, Any]:
    return {"chunk_id": chunk, "document_id": "doc_SECRET1", "knowledge_base_id": "kb_A",
            "title": "Acme <history>", "content": content}  # fmt: skip


ANSWER: list[dict[str, Any]] = [
    {
        "knowledge_base_id": "kb_A",
        "entities": [{"name": "Acme Corp", "entity_type": "organisation", "description": ""}],
        "relations": [
            {
                "source": "Jane Roe",
                "relation": "founded",
                "target": "Acme Corp",
                "description": "in 1990",
                **_hit("chk_SECRET1", "Jane Roe founded Acme Corp."),
            },
        ],
        "path": [],
        "text_hits": [_hit("chk_SECRET2", "Acme makes anvils. " * 40)],
    },
    {"knowledge_base_id": "kb_B", "error": "this knowledge base has no knowledge graph"},
]


def _setup(answer: list[dict[str, Any]]) -> tuple[ToolRegistry, list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json={"results": answer})

    client = KnowledgeClient("http://knowledge", transport=httpx.MockTransport(handle))
    registry = ToolRegistry()
    registry.register(QueryKnowledgeGraphTool(client, KnowledgeScope(MemoryAliasBook())))
    return registry, sent


def _call(args: dict[str, Any], *, kbs: list[str], limit: int = 24000) -> ToolInvocation:
    context = ToolContext(user_id="u", agent_id="a", knowledge_base_ids=kbs, max_output_chars=limit)
    return ToolInvocation(
        tenant_id="t", session_id="s", request_id="r", arguments=args, context=context
    )


async def test_relations_and_sources_first_then_text_hits_with_handles_only() -> None:
    registry, sent = _setup(ANSWER)
    args = {"knowledge_base_ids": ["kb_A", "kb_B"], "query": "Who founded Acme?"}
    outcome = await registry.execute("query_knowledge_graph", _call(args, kbs=["kb_A", "kb_B"]))
    assert outcome.success, outcome.error
    out = outcome.output
    assert sent[0]["knowledge_base_ids"] == ["kb_A", "kb_B"] and sent[0]["tenant_id"] == "t"
    assert '<knowledge_base id="b1">' in out and '<knowledge_base id="b2"><error>' in out
    relation = out.index('<relation source="Jane Roe" relation="founded" target="Acme Corp"')
    assert relation < out.index("<source_passages>") < out.index("<text_hits>")
    assert 'chunk="c1"' in out and '<passage id="c1" document="d1"' in out
    assert "Acme &lt;history&gt;" in out  # document text never opens a tag
    for stored in ("kb_A", "kb_B", "chk_", "doc_"):
        assert stored not in out  # SPEC E-22
    refs = {r["alias"]: r["chunk_id"] for r in outcome.data["references"]}
    assert refs == {"c1": "chk_SECRET1", "c2": "chk_SECRET2"}


async def test_the_output_budget_drops_text_hits_before_relations() -> None:
    registry, _ = _setup(ANSWER)
    args = {"knowledge_base_ids": ["kb_A"], "query": "Acme"}
    outcome = await registry.execute("query_knowledge_graph", _call(args, kbs=[], limit=1200))
    assert outcome.success
    assert len(outcome.output) <= 1200 * 4 // 5
    assert "<text_hits>" not in outcome.output and 'reason="output_budget"' in outcome.output
    assert "founded" in outcome.output


async def test_a_kb_outside_the_conversation_is_refused_before_knowledge_is_asked() -> None:
    registry, sent = _setup(ANSWER)
    args = {"knowledge_base_ids": ["kb_other"], "query": "Acme"}
    outcome = await registry.execute("query_knowledge_graph", _call(args, kbs=["kb_A"]))
    assert not outcome.success and "not available to this conversation" in (outcome.error or "")
    unknown = {"knowledge_base_ids": ["b7"], "query": "Acme"}
    outcome = await registry.execute("query_knowledge_graph", _call(unknown, kbs=["kb_A"]))
    assert not outcome.success and "unknown id 'b7'" in (outcome.error or "")
    assert sent == []
