"""``search_knowledge`` (SPEC T-07) as a tool: parameters, scope, output budget.

The output gives the model session handles (``c1``, ``d1``, ``b1``; SPEC E-22) and never
the stored ids; each document's header (title, KB) appears once; ``data.references`` maps
each chunk handle to its chunk for the engine. Past 4/5 of the tool output budget,
results are dropped from the bottom behind an ``<omitted ...>`` marker. The pipeline
itself runs in the knowledge service (``weft_knowledge.search``), asked with the turn's
credential.
"""

from __future__ import annotations

from typing import Any

from weft_tool_catalog.registry import ToolInvocation, ToolOutcome, dumps
from weft_tool_catalog.specs import SEARCH_KNOWLEDGE, SearchKnowledgeArguments

from weft_tools.knowledge_client import KnowledgeClient, KnowledgeUnavailable
from weft_tools.knowledge_scope import KnowledgeScope, OutOfScope
from weft_tools.ranking import Candidate, NoIndexInScope, SearchReport, terms


def omitted_marker(count: int) -> str:
    """The marker replacing results cut for the output budget."""
    return f'<omitted count={count} reason="output_budget">'


class SearchKnowledgeTool:
    """Hybrid/semantic/keyword search with rerank and MMR."""

    spec = SEARCH_KNOWLEDGE

    def __init__(self, knowledge: KnowledgeClient, scope: KnowledgeScope):
        self._knowledge = knowledge
        self._scope = scope

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Search and format."""
        args = call.args(SearchKnowledgeArguments)
        query = args.query
        try:
            kb_ids = await self._scope.knowledge_bases(call, args.knowledge_base_ids or [])
            report = await self._knowledge.search(
                call.tenant_id,
                kb_ids,
                query,
                args.mode,
                args.limit,
                credential=self._knowledge.credential_for(call),
                document_ids=call.context.document_ids,
                faq_tags=call.context.faq_tags,
                faq_score_boost=call.context.faq_score_boost,
            )
        except (OutOfScope, NoIndexInScope, KnowledgeUnavailable) as exc:
            return ToolOutcome(success=False, error=f"search_knowledge: {exc}")
        payload, references = await self._format(call, query, report)
        data: dict[str, Any] = {"references": references}
        pairs = zip(references, report.results, strict=True)  # one reference per result
        faq = [m for r, hit in pairs if (m := _faq_match(r["alias"], hit))]
        if faq:
            data["faq"] = faq
        return ToolOutcome(
            success=True,
            output=_within_budget(payload, call.context.max_output_chars * 4 // 5),
            display_type="search_results",
            data=data,
        )

    async def _format(
        self, call: ToolInvocation, query: str, report: SearchReport
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        documents: dict[str, dict[str, str]] = {}
        results: list[dict[str, Any]] = []
        references: list[dict[str, Any]] = []
        for hit in report.results:
            alias = await self._scope.handle(call, "chunk", hit.chunk_id)
            doc = await self._scope.handle(call, "document", hit.document_id)
            if doc not in documents:
                kb = await self._scope.handle(call, "knowledge_base", hit.knowledge_base_id)
                documents[doc] = {"title": hit.title, "knowledge_base": kb}
            result = {"id": alias, "document": doc, "content": hit.content}
            if hit.kind == "faq":
                result["type"] = "faq"
            results.append(result)
            references.append(_reference(alias, hit))
        payload: dict[str, Any] = {
            "query": query,
            "requested_mode": report.requested_mode.value,
            "count": len(results),
            "documents": documents,
            "results": results,
        }
        if report.mode_fallbacks:
            payload["mode_fallbacks"] = [
                await self._named_by_handle(call, fallback) for fallback in report.mode_fallbacks
            ]
        if report.rerank_rejected:
            payload["rerank_rejected"] = True
            words = " ".join(sorted(terms(query))[:5])
            payload["hint"] = (
                'No passage matched well; retry with mode="keyword" and exact terms, '
                f'e.g. "{words}".'
            )
        return payload, references

    async def _named_by_handle(
        self, call: ToolInvocation, fallback: dict[str, str]
    ) -> dict[str, str]:
        """A fallback as the model may read it: its knowledge base by handle (SPEC E-22)."""
        named = {k: v for k, v in fallback.items() if k != "knowledge_base_id"}
        kb = await self._scope.handle(call, "knowledge_base", fallback["knowledge_base_id"])
        return {"knowledge_base": kb, **named}


def _within_budget(payload: dict[str, Any], budget: int) -> str:
    """Drop results from the bottom until the JSON fits ``budget`` characters."""
    text = dumps(payload)
    results: list[dict[str, Any]] = payload["results"]
    dropped = 0
    while len(text) > budget and results:
        results.pop()
        dropped += 1
        payload["count"] = len(results)
        payload["omitted"] = omitted_marker(dropped)
        text = dumps(payload)
    return text


def _faq_match(alias: str, hit: Candidate) -> dict[str, Any] | None:
    """What quick-answer's direct answer reads of an FAQ result (SPEC C-04): the engine
    compares ``match_score`` (plus the agent's boost) with its threshold."""
    if hit.kind != "faq" or hit.match_score is None:
        return None
    return {
        "alias": alias,
        "question": hit.title,
        "answer": hit.answer,
        "match_score": hit.match_score,
    }


def _reference(alias: str, hit: Candidate) -> dict[str, Any]:
    return {
        "alias": alias,
        "chunk_id": hit.chunk_id,
        "document_id": hit.document_id,
        "knowledge_base_id": hit.knowledge_base_id,
        "title": hit.title,
        "excerpt": hit.content[:300],
    }
