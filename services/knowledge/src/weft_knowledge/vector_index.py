"""Semantic candidates: cosine similarity over a knowledge base's chunk embeddings.

PostgreSQL here has no vector extension, so vectors are stored as ``REAL[]`` and ranked in
the worker with numpy. Each worker keeps one matrix per knowledge base and reloads it only
when the KB's embedding version (count, newest chunk) changes: one cheap query per search.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from weft_storage.knowledge.documents import DocumentReader


@dataclass(frozen=True)
class _Matrix:
    version: tuple[int, str]
    ids: list[str]
    vectors: NDArray[np.float32]


class VectorIndex:
    """Per-worker cache of KB embedding matrices (LRU, ``max_kbs`` entries)."""

    def __init__(self, reader: DocumentReader, *, max_kbs: int = 64):
        self._reader = reader
        self._cache: OrderedDict[tuple[str, str], _Matrix] = OrderedDict()
        self._max = max_kbs
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    async def search(
        self, tenant_id: str, kb_id: str, query: list[float], limit: int, min_score: float
    ) -> list[tuple[str, float]]:
        """Best (chunk id, cosine) pairs of ``kb_id`` at or above ``min_score``."""
        matrix = await self._matrix(tenant_id, kb_id)
        if not matrix.ids:
            return []
        q = np.asarray(query, dtype=np.float32)
        scores = matrix.vectors @ q
        count = min(limit, len(matrix.ids))
        top = np.argpartition(-scores, count - 1)[:count]
        ranked = sorted(top.tolist(), key=lambda i: -float(scores[i]))
        return [(matrix.ids[i], float(scores[i])) for i in ranked if scores[i] >= min_score]

    async def _matrix(self, tenant_id: str, kb_id: str) -> _Matrix:
        key = (tenant_id, kb_id)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            version = await self._reader.embedding_version(tenant_id, kb_id)
            cached = self._cache.get(key)
            if cached is not None and cached.version == version:
                self._cache.move_to_end(key)
                return cached
            ids, vectors = await self._reader.embeddings(tenant_id, kb_id)
            array = np.asarray(vectors, dtype=np.float32).reshape(len(ids), -1)
            matrix = _Matrix(version, ids, array)
            self._cache[key] = matrix
            while len(self._cache) > self._max:
                self._cache.popitem(last=False)
            return matrix
