"""``query_knowledge_graph`` (SPEC T-10) as a tool: handles in, handles out.

knowledge queries each named KB's graph at once and answers per KB; here the answers
become what the model reads: per KB its entities, its relations (``<relation>``), the
passages stating them and then passages matching the query's words, or its ``<error>``.
The model sees session handles only (``bN``, ``dN``, ``cN``; SPEC E-22): never a stored
id. Past 4/5 of the tool output budget, text hits then relations are dropped from the
bottom behind an ``<omitted ...>`` marker.
"""

from __future__ import annotations

from html import escape
from typing import Any

from weft_tool_catalog.registry import ToolInvocation, ToolOutcome
from weft_tool_catalog.specs import QUERY_KNOWLEDGE_GRAPH, QueryKnowledgeGraphArguments

from weft_tools.knowledge_client import KnowledgeClient, KnowledgeUnavailable
from weft_tools.knowledge_scope import KnowledgeScope, OutOfScope

MAX_PASSAGE_CHARS = 1200
"""Characters of one passage shown (the model reads more with read_document)."""


def _attr(value: str) -> str:
    return escape(value, quote=True)


class QueryKnowledgeGraphTool:
    """Entities, relations and their source passages from the KBs' graphs."""

    spec = QUERY_KNOWLEDGE_GRAPH

    def __init__(self, knowledge: KnowledgeClient, scope: KnowledgeScope):
        self._knowledge = knowledge
        self._scope = scope

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Query and format."""
        args = call.args(QueryKnowledgeGraphArguments)
        try:
            kb_ids = await self._scope.knowledge_bases(call, list(args.knowledge_base_ids))
            answers = await self._knowledge.graph_query(
                call.tenant_id, kb_ids, args.query,
                credential=self._knowledge.credential_for(call),
            )  # fmt: skip
        except (OutOfScope, KnowledgeUnavailable) as exc:
            return ToolOutcome(success=False, error=f"query_knowledge_graph: {exc}")
        blocks, references = [], []
        for answer in answers:
            block, refs = await self._block(call, answer)
            blocks.append(block)
            references += refs
        return ToolOutcome(
            success=True,
            output=_within_budget(blocks, call.context.max_output_chars * 4 // 5),
            display_type="search_results",
            data={"references": references},
        )

    async def _block(
        self, call: ToolInvocation, answer: dict[str, Any]
    ) -> tuple[_Block, list[dict[str, Any]]]:
        kb = await self._scope.handle(call, "knowledge_base", answer["knowledge_base_id"])
        block = _Block(kb)
        if "error" in answer:
            block.error = str(answer["error"])
            return block, []
        block.entities = [
            f"{e['name']}" + (f" ({e['entity_type']})" if e["entity_type"] else "")
            + (f": {e['description']}" if e["description"] else "")
            for e in answer["entities"]
        ]  # fmt: skip
        references: list[dict[str, Any]] = []
        passages: dict[str, str] = {}
        for rel in [*answer["path"], *answer["relations"]]:
            chunk = await self._passage(call, rel, passages, references)
            line = (
                f'<relation source="{_attr(rel["source"])}" relation="{_attr(rel["relation"])}" '
                f'target="{_attr(rel["target"])}" chunk="{chunk}">'
                f"{escape(rel['description'])}</relation>"
            )
            if line not in block.relations:
                block.relations.append(line)
        block.sources = list(passages.values())
        for hit in answer["text_hits"]:
            block.text_hits.append(await self._chunk(call, hit, references))
        return block, references

    async def _passage(
        self, call: ToolInvocation, hit: dict[str, Any], passages: dict[str, str],
        references: list[dict[str, Any]],
    ) -> str:  # fmt: skip
        if hit["chunk_id"] not in passages:
            passages[hit["chunk_id"]] = await self._chunk(call, hit, references)
        return await self._scope.handle(call, "chunk", hit["chunk_id"])

    async def _chunk(
        self, call: ToolInvocation, hit: dict[str, Any], references: list[dict[str, Any]]
    ) -> str:
        alias = await self._scope.handle(call, "chunk", hit["chunk_id"])
        doc = await self._scope.handle(call, "document", hit["document_id"])
        references.append({
            "alias": alias, "chunk_id": hit["chunk_id"], "document_id": hit["document_id"],
            "knowledge_base_id": hit.get("knowledge_base_id", ""), "title": hit["title"],
            "excerpt": hit["content"][:300],
        })  # fmt: skip
        text = escape(hit["content"][:MAX_PASSAGE_CHARS])
        return (
            f'<passage id="{alias}" document="{doc}" title="{_attr(hit["title"])}">{text}</passage>'
        )


class _Block:
    """One KB's part of the output, trimmed from the bottom when over budget."""

    def __init__(self, kb: str):
        self.kb = kb
        self.error: str | None = None
        self.entities: list[str] = []
        self.relations: list[str] = []
        self.sources: list[str] = []
        self.text_hits: list[str] = []
        self.omitted = 0

    def render(self) -> str:
        if self.error is not None:
            error = escape(self.error)
            return f'<knowledge_base id="{self.kb}"><error>{error}</error></knowledge_base>'
        parts = [f'<knowledge_base id="{self.kb}">']
        if not self.entities:
            parts.append("<entities>no entity of this graph matches the query</entities>")
        else:
            parts.append("<entities>" + escape("; ".join(self.entities)) + "</entities>")
        parts += self.relations
        if self.sources:
            parts += ["<source_passages>", *self.sources, "</source_passages>"]
        if self.text_hits:
            parts += ["<text_hits>", *self.text_hits, "</text_hits>"]
        if self.omitted:
            parts.append(f'<omitted count={self.omitted} reason="output_budget">')
        parts.append("</knowledge_base>")
        return "\n".join(parts)

    def drop_one(self) -> bool:
        """Drop the least useful piece; False when nothing is left to drop."""
        for pieces in (self.text_hits, self.sources, self.relations, self.entities):
            if pieces:
                pieces.pop()
                self.omitted += 1
                return True
        return False


def _within_budget(blocks: list[_Block], budget: int) -> str:
    """Drop pieces from the last KB's bottom upwards until the output fits ``budget``."""
    text = "\n".join(b.render() for b in blocks)
    while len(text) > budget:
        if not any(b.drop_one() for b in reversed(blocks)):
            break
        text = "\n".join(b.render() for b in blocks)
    return text
