"""FAQ semantic search per query: before (every query read every vector of the FAQ bases
in scope from PostgreSQL, ``FaqStore.embedded``, and ranked them) and after (the
per-worker ``FaqVectorIndex``: one version query per base, the matrix reloaded only when
the base's embeddings change).

Loads ``--entries`` synthetic entries with ``--dimensions``-wide vectors into one FAQ base
of a fresh tenant, runs ``--queries`` searches of each kind after a warm-up and prints
p50/p99 (ms) and how many times the index read the vectors. Needs the local PostgreSQL
(``WEFT_DATABASE_URL``)::

    .venv/bin/python bench/faq_semantic.py --entries 5000 --queries 50
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import time

import numpy as np
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from weft_knowledge.faq_search import FAQ_SEMANTIC_MIN, FaqVectorIndex
from weft_storage.knowledge.faq import FaqDraft, FaqStore
from weft_storage.knowledge.store import KnowledgeStore


def _vector(rng: np.random.Generator, dimensions: int) -> list[float]:
    v = rng.standard_normal(dimensions).astype(np.float32)
    return [float(x) for x in v / np.linalg.norm(v)]


async def _before(faq: FaqStore, tenant: str, kb: str, query: np.ndarray, wanted: int) -> int:
    rows, vectors = await faq.embedded(tenant, [kb])
    matrix = np.asarray(vectors, dtype=np.float32).reshape(len(rows), -1)
    scores = matrix @ query
    order = np.argsort(-scores)[:wanted]
    return sum(1 for i in order.tolist() if scores[i] >= FAQ_SEMANTIC_MIN)


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered):8.2f} ms  p99 {p99:8.2f} ms"


async def main(entries: int, dimensions: int, queries: int) -> None:
    url = os.environ.get("WEFT_DATABASE_URL", "postgresql+asyncpg://weft:weft@127.0.0.1:15432/weft")
    engine = create_async_engine(url)
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    faq, store = FaqStore(sessions), KnowledgeStore(sessions)
    tenant = f"bench-{secrets.token_hex(4)}"
    kb = await store.create_knowledge_base(tenant, "faq bench", "", kind="faq")
    rng = np.random.default_rng(7)
    for start in range(0, entries, 1000):
        n = min(1000, entries - start)
        drafts = [FaqDraft(question=f"question {start + i}?", answer=f"answer {start + i}")
                  for i in range(n)]  # fmt: skip
        await faq.add(tenant, kb, drafts, [_vector(rng, dimensions) for _ in range(n)])
    index = FaqVectorIndex(faq)
    probes = [np.asarray(_vector(rng, dimensions), dtype=np.float32) for _ in range(queries)]
    await _before(faq, tenant, kb, probes[0], 15)  # warm-up
    await index.search(tenant, kb, probes[0], 15)
    loads_after_warmup = index.loads
    before: list[float] = []
    after: list[float] = []
    for q in probes:
        t = time.perf_counter()
        await _before(faq, tenant, kb, q, 15)
        before.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        await index.search(tenant, kb, q, 15)
        after.append((time.perf_counter() - t) * 1000)
    print(f"FAQ semantic search, {entries:,} entries x {dimensions} dims, {queries} queries")
    print(f"  before (scan every vector per query): {_ms(before)}")
    print(f"  after  (FaqVectorIndex, cached):      {_ms(after)}")
    print(f"  vector loads by the index: {index.loads} ({index.loads - loads_after_warmup} "
          f"after the warm-up)")  # fmt: skip
    async with sessions.begin() as s:  # the bench's tenant goes
        from sqlalchemy import delete
        from weft_storage.knowledge.models import KnowledgeBase

        await s.execute(delete(KnowledgeBase).where(KnowledgeBase.tenant_id == tenant))
    await engine.dispose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=5000)
    parser.add_argument("--dimensions", type=int, default=256)
    parser.add_argument("--queries", type=int, default=50)
    args = parser.parse_args()
    asyncio.run(main(args.entries, args.dimensions, args.queries))
