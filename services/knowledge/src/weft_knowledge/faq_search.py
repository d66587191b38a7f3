"""FAQ entries as search candidates (SPEC C-04): keyword over the entries' full text,
semantic over their questions' embeddings, each entry scored by how well one of its
phrasings matches the query.

The match score is what quick-answer's direct-answer threshold compares: the reranker's
score of the query against the question and each other phrasing (the answer is not
reranked: an answer that repeats the query's words is no better a match), or the
question's cosine with the query when that is higher. A candidate's content shows the
question and the answer, so a generation can quote it.
"""

from __future__ import annotations

import numpy as np
from weft_storage.knowledge.faq import FaqHit, FaqRow, FaqStore
from weft_tools.embeddings import Embedder
from weft_tools.ranking import RERANK_THRESHOLD, Candidate, Reranker

FAQ_SEMANTIC_MIN = 0.1


class FaqSearch:
    """FAQ candidates for one query over the FAQ bases in scope."""

    def __init__(self, faq: FaqStore, reranker: Reranker, embedder: Embedder | None):
        self._faq = faq
        self._reranker = reranker
        self._embedder = embedder

    async def candidates(
        self,
        tenant_id: str,
        kb_ids: list[str],
        query: str,
        wanted: int,
        *,
        keyword: bool,
        semantic: bool,
    ) -> list[Candidate]:
        """Entries matching ``query`` at or above the rerank threshold, best first."""
        found: dict[str, FaqRow] = {}
        cosine: dict[str, float] = {}
        if keyword:
            for hit in await self._faq.keyword_search(tenant_id, kb_ids, query, wanted):
                found[hit.entry.id] = hit.entry
        if semantic and self._embedder is not None:
            for hit in await self._semantic(tenant_id, kb_ids, query, wanted):
                found.setdefault(hit.entry.id, hit.entry)
                cosine[hit.entry.id] = hit.score
        scored = [
            _candidate(entry, max(await self._match(query, entry), cosine.get(entry.id, 0.0)))
            for entry in found.values()
        ]
        kept = [c for c in scored if (c.match_score or 0.0) >= RERANK_THRESHOLD]
        return sorted(kept, key=lambda c: -(c.match_score or 0.0))[:wanted]

    async def _match(self, query: str, entry: FaqRow) -> float:
        phrasings = [entry.question, *entry.similar_questions]
        return max(await self._reranker.scores(query, phrasings), default=0.0)

    async def _semantic(
        self, tenant_id: str, kb_ids: list[str], query: str, wanted: int
    ) -> list[FaqHit]:
        assert self._embedder is not None
        rows, vectors = await self._faq.embedded(tenant_id, kb_ids)
        if not rows:
            return []
        [q] = await self._embedder.embed([query])
        matrix = np.asarray(vectors, dtype=np.float32).reshape(len(rows), -1)
        scores = matrix @ np.asarray(q, dtype=np.float32)
        order = np.argsort(-scores)[:wanted]
        return [
            FaqHit(entry=rows[i], score=float(scores[i]))
            for i in order.tolist()
            if scores[i] >= FAQ_SEMANTIC_MIN
        ]


def _candidate(entry: FaqRow, match: float) -> Candidate:
    return Candidate(
        chunk_id=entry.id,
        document_id=entry.id,
        knowledge_base_id=entry.knowledge_base_id,
        title=entry.question,
        content=f"Q: {entry.question}\nA: {entry.answer}",
        score=match,
        rerank_score=match,
        kind="faq",
        answer=entry.answer,
        match_score=round(min(1.0, match), 4),
    )
