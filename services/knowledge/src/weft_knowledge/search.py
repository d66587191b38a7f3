"""The ``search_knowledge`` pipeline (SPEC T-07).

scope -> per-KB mode (a KB without embeddings falls back to keyword, reported) ->
keyword (PostgreSQL full text) and/or semantic (cosine over embeddings) candidates ->
RRF fusion -> de-dup -> rerank (0.3, else best >= 0.15) -> MMR (lambda 0.7) -> limit.

FAQ bases in scope add their entries as candidates (``faq_search``), scored by their
match with the query; with FAQ priority (quick-answer, SPEC C-04) they come first, ranked
by that score plus the agent's boost. A mention's targets (SPEC A-11) bound the search:
the chunks to its documents (``document_ids``), the FAQ entries to those carrying one of
its tags (``faq_tags``); under a mention, what it does not name is not searched.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from weft_storage.knowledge.documents import DocumentReader, ScopeStats
from weft_storage.knowledge.faq import FaqStore
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

from weft_knowledge.faq_search import FaqSearch
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
        faq: FaqStore | None = None,
    ):
        self._store = store
        self._reader = reader
        self._embedder = embedder
        self._reranker = reranker or LexicalReranker()
        self._vectors = vectors or VectorIndex(reader)
        self._faq = faq
        self._faq_search = FaqSearch(faq, self._reranker, embedder) if faq else None

    async def search(
        self,
        tenant_id: str,
        kb_ids: list[str],
        query: str,
        mode: SearchMode,
        limit: int,
        *,
        document_ids: Sequence[str] = (),
        faq_tags: Sequence[str] = (),
        faq_score_boost: float | None = None,
    ) -> SearchReport:
        """Search ``kb_ids`` (all the tenant's KBs when empty); under a mention
        (``document_ids`` or ``faq_tags`` given) only those documents' chunks and the FAQ
        entries tagged one of ``faq_tags``; ``faq_score_boost`` not None: FAQ priority
        with that boost."""
        mentioned = bool(document_ids or faq_tags)
        stats: list[ScopeStats] = []
        if document_ids or not mentioned:
            stats = [s for s in await self._reader.scope_stats(tenant_id, kb_ids) if s.chunks]
        faq_kbs = await self._faq_bases(tenant_id, kb_ids, mentioned, faq_tags)
        if not stats and not faq_kbs:
            raise NoIndexInScope("no knowledge base in scope has indexed content")
        report = SearchReport(results=[], requested_mode=mode)
        kept: list[Candidate] = []
        if stats:
            kept, rejected = await self._chunks(
                tenant_id, kb_ids, stats, query, mode, limit, document_ids, report
            )
            report.rerank_rejected = rejected
        faqs: list[Candidate] = []
        if faq_kbs and self._faq_search is not None:
            keyword, semantic = self._faq_plan(mode, faq_kbs, report)
            faqs = await self._faq_search.candidates(
                tenant_id, sorted(faq_kbs), query, limit * CANDIDATE_FACTOR,
                keyword=keyword, semantic=semantic, tags=faq_tags,
            )  # fmt: skip
            report.rerank_rejected = report.rerank_rejected and not faqs
        report.results = merge_faq(kept, faqs, limit, faq_score_boost)
        return report

    async def _faq_bases(
        self, tenant_id: str, kb_ids: list[str], mentioned: bool, tags: Sequence[str]
    ) -> dict[str, tuple[int, int]]:
        """FAQ bases in scope -> (entries, embedded entries); under a mention, only the
        bases holding an entry with one of its ``tags`` (none without a tag)."""
        if self._faq is None or (mentioned and not tags):
            return {}
        bases = await self._faq.faq_bases(tenant_id, kb_ids)
        if not mentioned:
            return bases
        tagged = {kb for kb, _ in await self._faq.tagged(tenant_id, kb_ids, tags)}
        return {kb: counts for kb, counts in bases.items() if kb in tagged}

    def _faq_plan(
        self, mode: SearchMode, bases: dict[str, tuple[int, int]], report: SearchReport
    ) -> tuple[bool, bool]:
        """(keyword, semantic) over FAQ entries; semantic without vectors falls back."""
        vectors = self._embedder is not None and any(e for _, e in bases.values())
        if mode is not SearchMode.KEYWORD and not vectors:
            reason = "no embedder configured" if self._embedder is None else "no embeddings yet"
            report.mode_fallbacks += [
                {"knowledge_base_id": kb, "from": mode.value, "to": "keyword", "reason": reason}
                for kb in sorted(bases)
            ]
            return True, False
        return mode is not SearchMode.SEMANTIC, mode is not SearchMode.KEYWORD

    async def _chunks(
        self,
        tenant_id: str,
        kb_ids: list[str],
        stats: list[ScopeStats],
        query: str,
        mode: SearchMode,
        limit: int,
        document_ids: Sequence[str],
        report: SearchReport,
    ) -> tuple[list[Candidate], bool]:
        """Chunk candidates after fusion, de-dup and rerank; (kept, all rejected)."""
        keyword_kbs, semantic_kbs = self._plan(mode, stats, report)
        wanted = limit * CANDIDATE_FACTOR
        rankings: list[list[str]] = []
        hits: dict[str, ChunkHit] = {}
        if keyword_kbs:
            found = await self._store.keyword_search(
                tenant_id, keyword_kbs, query, wanted, document_ids=document_ids
            )
            hits.update((h.chunk_id, h) for h in found)
            rankings.append([h.chunk_id for h in found])
        if semantic_kbs and document_ids:
            rankings.append(await self._targeted(tenant_id, kb_ids, document_ids, query, wanted))
        elif semantic_kbs:
            rankings.append(await self._semantic(tenant_id, semantic_kbs, query, wanted))
        fused = rrf([r for r in rankings if r])
        ordered = sorted(fused, key=lambda cid: -fused[cid])[:wanted]
        missing = [cid for cid in ordered if cid not in hits]
        hits.update(
            (h.chunk_id, h) for h in await self._reader.chunks_by_ids(tenant_id, kb_ids, missing)
        )
        candidates = dedupe([_candidate(hits[c], fused[c]) for c in ordered if c in hits])
        return await rerank(self._reranker, query, candidates)

    async def _targeted(
        self,
        tenant_id: str,
        kb_ids: list[str],
        document_ids: Sequence[str],
        query: str,
        wanted: int,
    ) -> list[str]:
        """Semantic candidates among the chunks of a mention's documents."""
        assert self._embedder is not None
        ids, vectors = await self._reader.document_embeddings(tenant_id, kb_ids, list(document_ids))
        if not ids:
            return []
        [vector] = await self._embedder.embed([query])
        matrix = np.asarray(vectors, dtype=np.float32).reshape(len(ids), -1)
        scores = matrix @ np.asarray(vector, dtype=np.float32)
        order = np.argsort(-scores)[:wanted].tolist()
        return [ids[i] for i in order if scores[i] >= SEMANTIC_MIN_SCORE]

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


def merge_faq(
    chunks: list[Candidate], faqs: list[Candidate], limit: int, boost: float | None
) -> list[Candidate]:
    """The results: with FAQ priority (``boost`` not None) the FAQ entries first, by
    their match plus the boost, then the chunks (MMR) in the places left; without it,
    entries and chunks compete on their rerank scores."""
    if boost is None:
        pooled = sorted(chunks + faqs, key=lambda c: -(c.rerank_score or 0.0))
        return mmr(pooled, limit)
    first = sorted(faqs, key=lambda c: -((c.match_score or 0.0) + boost))[:limit]
    return first + mmr(chunks, limit - len(first))


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
