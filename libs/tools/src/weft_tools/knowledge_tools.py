"""``search_knowledge``: keyword search over the tenant's knowledge bases (SPEC T-07, part).

The output gives the model short ids (``c1``, ``c2`` ... per call, SPEC E-22) and never the
stored UUIDs; ``data.references`` maps each alias to its chunk for the engine.
"""

from __future__ import annotations

from typing import Any

from weft_storage.knowledge import ChunkHit, KnowledgeStore

from weft_tools.registry import ToolInvocation, ToolOutcome, ToolSpec, dumps

SEARCH_KNOWLEDGE = ToolSpec(
    name="search_knowledge",
    description=(
        "Search the knowledge bases available to this conversation. Returns the most "
        "relevant passages with short ids (c1, c2, ...) to cite in the answer as [c1]."
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "description": "What to look for."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 30, "default": 10},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    read_only=True,
)


class SearchKnowledgeTool:
    """Keyword search; semantic/hybrid, rerank and MMR come with the tools issue."""

    spec = SEARCH_KNOWLEDGE

    def __init__(self, store: KnowledgeStore):
        self._store = store

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Search and format the hits."""
        query = str(call.arguments["query"])
        limit = int(call.arguments.get("limit", 10))
        hits = await self._store.keyword_search(
            call.tenant_id, call.context.knowledge_base_ids, query, limit
        )
        results = [_result(f"c{i}", hit) for i, hit in enumerate(hits, start=1)]
        references = [_reference(f"c{i}", hit) for i, hit in enumerate(hits, start=1)]
        return ToolOutcome(
            success=True,
            output=dumps({"query": query, "count": len(results), "results": results}),
            display_type="search_results",
            data={"references": references},
        )


def _result(alias: str, hit: ChunkHit) -> dict[str, Any]:
    return {"id": alias, "title": hit.title, "content": hit.content}


def _reference(alias: str, hit: ChunkHit) -> dict[str, Any]:
    return {
        "alias": alias,
        "chunk_id": hit.chunk_id,
        "document_id": hit.document_id,
        "knowledge_base_id": hit.knowledge_base_id,
        "title": hit.title,
        "excerpt": hit.content[:300],
    }
