"""search_knowledge latency on a 10,000-chunk knowledge base: keyword, semantic, hybrid.

Loads 10,000 synthetic chunks (with the scripted test double's deterministic 256-d
embeddings) into the real PostgreSQL, then runs the whole search pipeline in-process
(candidates, RRF, rerank, MMR) for N queries per mode after a warm-up (which also fills
the worker's vector cache, as a long-running tool-exec would have). Prints p50/p99 and
writes ``bench/results/search_latency.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import secrets
import statistics
import time
from pathlib import Path

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from ulid import ULID
from weft_scripted_llm.embeddings import embed_text
from weft_storage.knowledge import KnowledgeStore
from weft_storage.knowledge_documents import DocumentReader
from weft_storage.models import Chunk, Document
from weft_testkit import infra_env
from weft_tools.knowledge_search import KnowledgeSearch, SearchMode

REPO = Path(__file__).resolve().parents[1]
TOPICS = [
    "refund", "invoice", "security", "encryption", "backup", "region", "latency", "billing",
    "password", "account", "export", "import", "webhook", "quota", "storage", "support",
    "contract", "privacy", "audit", "retention", "upgrade", "migration", "cluster", "alert",
]  # fmt: skip
FILLER = "the a customer plan team service data request policy system user page report".split()  # noqa: SIM905


class ScriptedEmbedder:
    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [embed_text(t, 256) for t in texts]


def passage(rng: random.Random) -> str:
    words = rng.sample(TOPICS, 4) + [rng.choice(FILLER) for _ in range(60)]
    rng.shuffle(words)
    return " ".join(words) + "."


async def load(sessions: async_sessionmaker, tenant: str, kb: str, chunks: int) -> None:  # type: ignore[type-arg]
    rng = random.Random(7)
    per_doc = 50
    for start in range(0, chunks, 1000):
        async with sessions.begin() as s:
            docs, rows = [], []
            for d in range(start // per_doc, (start + 1000) // per_doc):
                doc_id = f"doc_{ULID()}"
                docs.append({"id": doc_id, "tenant_id": tenant, "knowledge_base_id": kb,
                             "title": f"Doc {d}", "file_name": "", "status": "ready",
                             "chunk_count": per_doc, "embedded_count": per_doc})  # fmt: skip
                for p in range(per_doc):
                    text = passage(rng)
                    rows.append({"id": f"chk_{ULID()}", "tenant_id": tenant,
                                 "knowledge_base_id": kb, "document_id": doc_id, "position": p,
                                 "content": text, "embedding": embed_text(text, 256)})  # fmt: skip
            await s.execute(insert(Document), docs)
            await s.execute(insert(Chunk), rows)


async def measure(
    search: KnowledgeSearch, tenant: str, kb: str, mode: SearchMode, n: int
) -> list[float]:
    rng = random.Random(11)
    times = []
    for i in range(n + 5):
        query = " ".join(rng.sample(TOPICS, 2)) + " for the customer"
        started = time.perf_counter()
        await search.search(tenant, [kb], query, mode, 10)
        if i >= 5:  # warm-up
            times.append((time.perf_counter() - started) * 1000)
    return times


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def main(chunks: int, queries: int, out: Path) -> dict[str, object]:
    engine = create_async_engine(infra_env()["WEFT_DATABASE_URL"])
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    store = KnowledgeStore(sessions)
    tenant = f"bench-{secrets.token_hex(4)}"
    kb = await store.create_knowledge_base(tenant, "bench-10k")
    started = time.perf_counter()
    await load(sessions, tenant, kb, chunks)
    load_s = time.perf_counter() - started
    search = KnowledgeSearch(store, DocumentReader(sessions), embedder=ScriptedEmbedder())
    result: dict[str, object] = {
        "chunks": chunks,
        "queries_per_mode": queries,
        "load_s": round(load_s, 1),
    }
    for mode in (SearchMode.KEYWORD, SearchMode.SEMANTIC, SearchMode.HYBRID):
        times = await measure(search, tenant, kb, mode, queries)
        p50, p99 = round(statistics.median(times), 1), round(pct(times, 99), 1)
        result[mode.value] = {"p50_ms": p50, "p99_ms": p99}
        print(f"{mode.value:8s} p50 {p50:7.1f} ms   p99 {p99:7.1f} ms", flush=True)
    await engine.dispose()
    await asyncio.to_thread(_write, out, result)
    return result


def _write(out: Path, result: dict[str, object]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument(
        "--out", type=Path, default=REPO / "bench" / "results" / "search_latency.json"
    )
    args = parser.parse_args()
    asyncio.run(main(args.chunks, args.queries, args.out))
