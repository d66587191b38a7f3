"""Ranking steps of ``search_knowledge`` (SPEC T-07): RRF fusion, rerank with thresholds,
MMR diversity. Pure functions over candidates, so each rule is unit-testable.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import httpx
import snowballstemmer
from weft_mcp_client.safe_http import tls_context
from weft_tool_catalog.specs import SearchMode

RRF_K = 60
RERANK_THRESHOLD = 0.3
RERANK_FALLBACK_MIN = 0.15
MMR_LAMBDA = 0.7

_WORD = re.compile(r"\w{2,}", re.UNICODE)
_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "the",
        "to",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
    ]
)


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A chunk on its way through the pipeline."""

    chunk_id: str
    document_id: str
    knowledge_base_id: str
    title: str
    content: str
    position: int = 0
    score: float = 0.0
    rerank_score: float | None = None
    kind: str = "chunk"
    """'chunk' (of a document) or 'faq' (an FAQ entry: ``chunk_id`` and ``document_id``
    are the entry's id, ``title`` its question, ``answer`` its answer)."""
    answer: str = ""
    match_score: float | None = None
    """An FAQ entry's match with the query in [0, 1] (the best of its phrasings' rerank
    score and its question's cosine), what quick-answer's direct-answer threshold reads."""


class NoIndexInScope(LookupError):
    """No knowledge base in scope has any chunk: nothing can be searched."""


@dataclass(kw_only=True)
class SearchReport:
    """What the search pipeline found and how: knowledge builds it, its
    ``POST /internal/search`` sends it, tool-exec's ``search_knowledge`` reads it."""

    results: list[Candidate]
    requested_mode: SearchMode
    mode_fallbacks: list[dict[str, str]] = field(default_factory=list)
    rerank_rejected: bool = False


_STEMMER = snowballstemmer.stemmer("english")
"""The Snowball English stemmer, the one PostgreSQL's ``english`` text search (the keyword
index) uses, so the reranker and the index agree that "refunded" answers "refund"."""


def terms(text: str) -> set[str]:
    """Lower-cased content words."""
    return {w for w in (m.lower() for m in _WORD.findall(text)) if w not in _STOPWORDS}


def stems(text: str) -> set[str]:
    """The stems of the content words: what the reranker and MMR compare."""
    return set(_STEMMER.stemWords(sorted(terms(text))))


def rrf(rankings: Sequence[Sequence[str]], k: int = RRF_K) -> dict[str, float]:
    """Reciprocal rank fusion: sum over rankings of 1 / (k + rank)."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, chunk_id in enumerate(ranking, start=1):
            fused[chunk_id] = fused.get(chunk_id, 0.0) + 1.0 / (k + rank)
    return fused


class Reranker(Protocol):
    """Scores passages against a query in [0, 1]."""

    async def scores(self, query: str, passages: list[str]) -> list[float]:
        """One score per passage."""
        ...


class LexicalReranker:
    """Offline default: share of the query's content words found in the passage, compared
    by stem (plus a bonus for the exact phrase). Cheap, deterministic, no model."""

    async def scores(self, query: str, passages: list[str]) -> list[float]:
        """Coverage scores."""
        wanted = stems(query)
        phrase = " ".join(query.lower().split())
        if not wanted:
            return [0.0 for _ in passages]
        result = []
        for text in passages:
            coverage = len(wanted & stems(text)) / len(wanted)
            bonus = 0.2 if len(phrase) > 3 and phrase in text.lower() else 0.0
            result.append(min(1.0, coverage + bonus))
        return result


class HttpRerankModel:
    """A rerank model behind the common ``POST /rerank`` API (Jina/Cohere/vLLM shape)."""

    def __init__(self, *, base_url: str, model: str, api_key: str = "", timeout_s: float = 15):
        self._base_url = base_url.rstrip("/")
        self._model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = timeout_s

    async def scores(self, query: str, passages: list[str]) -> list[float]:
        """Relevance scores from the model."""
        body = {"model": self._model, "query": query, "documents": passages}
        async with httpx.AsyncClient(timeout=self._timeout, verify=tls_context()) as client:
            response = await client.post(
                f"{self._base_url}/rerank", json=body, headers=self._headers
            )
            response.raise_for_status()
        result = [0.0] * len(passages)
        for item in response.json().get("results", []):
            result[int(item["index"])] = float(item["relevance_score"])
        return result


async def rerank(
    reranker: Reranker, query: str, candidates: list[Candidate]
) -> tuple[list[Candidate], bool]:
    """Keep candidates scoring >= 0.3; if none does, keep the best one when it scores
    >= 0.15. Returns (kept, rejected_all)."""
    if not candidates:
        return [], False
    scores = await reranker.scores(query, [c.content for c in candidates])
    scored = sorted(
        (replace(c, rerank_score=s) for c, s in zip(candidates, scores, strict=True)),
        key=lambda c: -(c.rerank_score or 0.0),
    )
    kept = [c for c in scored if (c.rerank_score or 0.0) >= RERANK_THRESHOLD]
    if kept:
        return kept, False
    best = scored[0]
    if (best.rerank_score or 0.0) >= RERANK_FALLBACK_MIN:
        return [best], False
    return [], True


def mmr(candidates: list[Candidate], limit: int, lam: float = MMR_LAMBDA) -> list[Candidate]:
    """Maximal marginal relevance: relevance (rerank, else fused score, scaled to [0, 1])
    against word-overlap similarity with what is already picked."""
    if len(candidates) <= 1:
        return candidates[:limit]
    rel = [c.rerank_score if c.rerank_score is not None else c.score for c in candidates]
    top = max(rel) or 1.0
    relevance = [r / top for r in rel]
    words = [stems(c.content) for c in candidates]
    picked: list[int] = []
    left = list(range(len(candidates)))
    while left and len(picked) < limit:

        def gain(i: int) -> float:
            overlap = max((_jaccard(words[i], words[j]) for j in picked), default=0.0)
            return lam * relevance[i] - (1 - lam) * overlap

        best = max(left, key=gain)
        picked.append(best)
        left.remove(best)
    return [candidates[i] for i in picked]


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def dedupe(candidates: list[Candidate]) -> list[Candidate]:
    """Drop repeated chunks and repeated contents (overlapping chunks, copies across KBs)."""
    seen_ids: set[str] = set()
    seen_text: set[str] = set()
    kept = []
    for c in candidates:
        text = " ".join(c.content.split()).lower()
        if c.chunk_id in seen_ids or text in seen_text:
            continue
        seen_ids.add(c.chunk_id)
        seen_text.add(text)
        kept.append(c)
    return kept
