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

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from weft_storage.knowledge.faq import FaqHit, FaqRow, FaqStore
from weft_tools.embeddings import Embedder
from weft_tools.ranking import RERANK_THRESHOLD, Candidate, Reranker

FAQ_SEMANTIC_MIN = 0.1


@dataclass(frozen=True)
class _Matrix:
    version: tuple[int, str]
    ids: list[str]
    tags: NDArray[np.str_]
    vectors: NDArray[np.float32]


class FaqVectorIndex:
    """Per-worker cache of FAQ bases' question vectors (LRU, ``max_kbs`` bases): a base's
    matrix is reloaded only when its embedding version (entries embedded, newest write)
    moves, so a query costs one small version query per base, not a scan of its vectors
    (the chunks' :class:`~weft_knowledge.vector_index.VectorIndex` does the same)."""

    def __init__(self, faq: FaqStore, *, max_kbs: int = 64):
        self._faq = faq
        self._cache: OrderedDict[tuple[str, str], _Matrix] = OrderedDict()
        self._max = max_kbs
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self.loads = 0
        """Matrices read from the database (what the bench and tests watch)."""

    async def search(
        self, tenant_id: str, kb_id: str, query: NDArray[np.float32], limit: int,
        tags: Sequence[str] = (),
    ) -> list[tuple[str, float]]:  # fmt: skip
        """Best (entry id, cosine) pairs of ``kb_id`` at or above the semantic floor;
        only entries tagged one of ``tags`` when given."""
        matrix = await self._matrix(tenant_id, kb_id)
        if not matrix.ids:
            return []
        scores = matrix.vectors @ query
        if tags:
            scores = np.where(np.isin(matrix.tags, list(tags)), scores, -np.inf)
        count = min(limit, len(matrix.ids))
        top = np.argpartition(-scores, count - 1)[:count]
        ranked = sorted(top.tolist(), key=lambda i: -float(scores[i]))
        return [(matrix.ids[i], float(scores[i])) for i in ranked if scores[i] >= FAQ_SEMANTIC_MIN]

    async def _matrix(self, tenant_id: str, kb_id: str) -> _Matrix:
        key = (tenant_id, kb_id)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            version = await self._faq.embedding_version(tenant_id, kb_id)
            cached = self._cache.get(key)
            if cached is not None and cached.version == version:
                self._cache.move_to_end(key)
                return cached
            ids, tags, vectors = await self._faq.vectors(tenant_id, kb_id)
            self.loads += 1
            array = np.asarray(vectors, dtype=np.float32).reshape(len(ids), -1)
            matrix = _Matrix(version, ids, np.asarray(tags, dtype=np.str_), array)
            self._cache[key] = matrix
            while len(self._cache) > self._max:
                evicted, _ = self._cache.popitem(last=False)
                self._locks.pop(evicted, None)
            return matrix


class FaqSearch:
    """FAQ candidates for one query over the FAQ bases in scope."""

    def __init__(
        self, faq: FaqStore, reranker: Reranker, embedder: Embedder | None,
        index: FaqVectorIndex | None = None,
    ):  # fmt: skip
        self._faq = faq
        self._reranker = reranker
        self._embedder = embedder
        self.index = index or FaqVectorIndex(faq)

    async def candidates(
        self,
        tenant_id: str,
        kb_ids: list[str],
        query: str,
        wanted: int,
        *,
        keyword: bool,
        semantic: bool,
        tags: Sequence[str] = (),
    ) -> list[Candidate]:
        """Entries matching ``query`` at or above the rerank threshold, best first; only
        those tagged one of ``tags`` when given (SPEC A-11's @tag)."""
        found: dict[str, FaqRow] = {}
        cosine: dict[str, float] = {}
        if keyword:
            hits = await self._faq.keyword_search(tenant_id, kb_ids, query, wanted, tags=tags)
            for hit in hits:
                found[hit.entry.id] = hit.entry
        if semantic and self._embedder is not None:
            for hit in await self._semantic(tenant_id, kb_ids, query, wanted, tags):
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
        self, tenant_id: str, kb_ids: list[str], query: str, wanted: int, tags: Sequence[str]
    ) -> list[FaqHit]:
        assert self._embedder is not None
        [q] = await self._embedder.embed([query])
        vector = np.asarray(q, dtype=np.float32)
        scored: list[tuple[str, float]] = []
        for kb in kb_ids:
            scored += await self.index.search(tenant_id, kb, vector, wanted, tags)
        scored.sort(key=lambda pair: -pair[1])
        best = dict(scored[:wanted])
        rows = await self._faq.by_ids(tenant_id, kb_ids, list(best))
        return [FaqHit(entry=row, score=best[row.id]) for row in rows]


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
