"""The ``search_knowledge`` pipeline (SPEC T-07).

scope -> per-KB mode (a KB without embeddings falls back to keyword, reported) ->
keyword (PostgreSQL full text) and/or semantic (cosine over embeddings) candidates ->
RRF fusion -> de-dup -> rerank (0.3, else best >= 0.15) -> MMR (lambda 0.7) -> limit.
"""

from __future__ import annotations

from weft_storage.knowledge.documents import DocumentReader, ScopeStats
from weft_storage.knowledge.store import ChunkHit, KnowledgeStore
from weft_tool_catalog.specs import SearchMode as SearchMode  # re-exported: callers import it here
from weft_tools.embeddings import Embedder
from weft_tools.ranking import (
    Candidate,
    LexicalReranker,
    NoIndexInScope,
    Reranker,
    SearchReport,
    dedupe,
    mmr,
    rerank,
    rrf,
)

from weft_knowledge.vector_index import VectorIndex

CANDIDATE_FACTOR = 3
SEMANTIC_MIN_SCORE = 0.1
"""Global threshold on cosine similarity for semantic candidates."""


class KnowledgeSearch:
    """Runs the pipeline for one query."""

    def __init__(
        self,
        store: KnowledgeStore,
        reader: DocumentReader,
        *,
        embedder: Embedder | None = None,
        reranker: Reranker | None = None,
        vectors: VectorIndex | None = None,
    ):
        self._store = store
        self._reader = reader
        self._embedder = embedder
        self._reranker = reranker or LexicalReranker()
        self._vectors = vectors or VectorIndex(reader)

    async def search(
        self, tenant_id: str, kb_ids: list[str], query: str, mode: SearchMode, limit: int
    ) -> SearchReport:
        """Search ``kb_ids`` (all the tenant's KBs when empty)."""
        stats = [s for s in await self._reader.scope_stats(tenant_id, kb_ids) if s.chunks]
        if not stats:
            raise NoIndexInScope("no knowledge base in scope has indexed content")
        report = SearchReport(results=[], requested_mode=mode)
        keyword_kbs, semantic_kbs = self._plan(mode, stats, report)
        wanted = limit * CANDIDATE_FACTOR
        rankings: list[list[str]] = []
        hits: dict[str, ChunkHit] = {}
        if keyword_kbs:
            found = await self._store.keyword_search(tenant_id, keyword_kbs, query, wanted)
            hits.update((h.chunk_id, h) for h in found)
            rankings.append([h.chunk_id for h in found])
        if semantic_kbs:
            rankings.append(await self._semantic(tenant_id, semantic_kbs, query, wanted))
        fused = rrf([r for r in rankings if r])
        ordered = sorted(fused, key=lambda cid: -fused[cid])[:wanted]
        missing = [cid for cid in ordered if cid not in hits]
        hits.update(
            (h.chunk_id, h) for h in await self._reader.chunks_by_ids(tenant_id, kb_ids, missing)
        )
        candidates = dedupe([_candidate(hits[c], fused[c]) for c in ordered if c in hits])
        kept, report.rerank_rejected = await rerank(self._reranker, query, candidates)
        report.results = mmr(kept, limit)
        return report

    def _plan(
        self, mode: SearchMode, stats: list[ScopeStats], report: SearchReport
    ) -> tuple[list[str], list[str]]:
        """KBs searched by keyword and by vector; a KB that cannot do vectors falls back."""
        keyword: list[str] = []
        semantic: list[str] = []
        for s in stats:
            kb = s.knowledge_base_id
            vector_ok = s.embedded > 0 and self._embedder is not None
            if mode is not SearchMode.KEYWORD and not vector_ok:
                reason = "no embedder configured" if self._embedder is None else "no embeddings yet"
                report.mode_fallbacks.append(
                    {"knowledge_base_id": kb, "from": mode.value, "to": "keyword", "reason": reason}
                )
                keyword.append(kb)
                continue
            if mode in (SearchMode.KEYWORD, SearchMode.HYBRID):
                keyword.append(kb)
            if mode in (SearchMode.SEMANTIC, SearchMode.HYBRID):
                semantic.append(kb)
        return keyword, semantic

    async def _semantic(
        self, tenant_id: str, kb_ids: list[str], query: str, wanted: int
    ) -> list[str]:
        assert self._embedder is not None  # _plan only picks semantic KBs with an embedder
        [vector] = await self._embedder.embed([query])
        scored: list[tuple[str, float]] = []
        for kb in kb_ids:
            scored += await self._vectors.search(tenant_id, kb, vector, wanted, SEMANTIC_MIN_SCORE)
        scored.sort(key=lambda pair: -pair[1])
        return [cid for cid, _ in scored[:wanted]]


def _candidate(hit: ChunkHit, score: float) -> Candidate:
    return Candidate(
        chunk_id=hit.chunk_id,
        document_id=hit.document_id,
        knowledge_base_id=hit.knowledge_base_id,
        title=hit.title,
        content=hit.content,
        position=hit.position,
        score=score,
    )
