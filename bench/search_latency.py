"""search_knowledge latency on a 10,000-chunk knowledge base: keyword, semantic, hybrid.

Loads 10,000 synthetic chunks (with the scripted test double's deterministic 256-d
embeddings) into the real PostgreSQL, then runs the whole search pipeline in-process
(candidates, RRF, rerank, MMR) for N queries per mode after a warm-up (which also fills
the worker's vector cache, as a long-running tool-exec would have). Measures twice: "fresh"
right after the bulk load, "settled" after VACUUM ANALYZE (what autovacuum does shortly
after a load: GIN pending list merged, planner statistics). Prints p50/p99 and
the EXPLAIN ANALYZE of the keyword passes (the GIN index must appear), writes
``bench/results/search_latency.json`` and deletes its knowledge base (``--keep`` keeps it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import statistics
import time
from pathlib import Path

from sqlalchemy import delete, func, insert, text
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from ulid import ULID
from weft_knowledge.search import KnowledgeSearch, SearchMode
from weft_scripted_llm.embeddings import embed_text
from weft_storage.knowledge.documents import DocumentReader
from weft_storage.knowledge.models import Chunk, Document, KnowledgeBase
from weft_storage.knowledge.store import KnowledgeStore, keyword_tsquery, ranked_matches
from weft_testkit import infra_env

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


async def explain(sessions: async_sessionmaker, tenant: str, kb: str, query: str) -> dict[str, str]:  # type: ignore[type-arg]
    """EXPLAIN ANALYZE of both keyword passes, as KnowledgeStore builds them."""
    passes = {
        "all_words": func.websearch_to_tsquery("english", query),
        "any_word": func.to_tsquery("english", keyword_tsquery(query)),
    }
    plans = {}
    async with sessions() as s:
        conn = await s.connection()
        await conn.execute(text("ANALYZE chunks"))
        for name, tsq in passes.items():
            compiled = ranked_matches(tenant, [kb], tsq, 30).compile(
                dialect=conn.dialect, compile_kwargs={"render_postcompile": True}
            )
            params = tuple(compiled.params[k] for k in compiled.positiontup or ())
            result = await conn.exec_driver_sql(f"EXPLAIN ANALYZE {compiled}", params)
            plans[name] = "\n".join(r[0] for r in result.all())
    return plans


async def settle(engine: AsyncEngine) -> None:
    """What autovacuum does within a minute of a bulk load: flush the GIN index's pending
    list and give the planner statistics."""
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text("VACUUM ANALYZE chunks"))


async def drop(sessions: async_sessionmaker, kb: str) -> None:  # type: ignore[type-arg]
    async with sessions.begin() as s:  # chunks go with their documents (ON DELETE CASCADE)
        await s.execute(delete(Document).where(Document.knowledge_base_id == kb))
        await s.execute(delete(KnowledgeBase).where(KnowledgeBase.id == kb))


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def main(chunks: int, queries: int, out: Path, keep: bool) -> dict[str, object]:
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
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    for phase in ("fresh", "settled"):
        if phase == "settled":
            await settle(engine)
        for mode in (SearchMode.KEYWORD, SearchMode.SEMANTIC, SearchMode.HYBRID):
            times = await measure(search, tenant, kb, mode, queries)
            p50, p99 = round(statistics.median(times), 1), round(pct(times, 99), 1)
            result[f"{mode.value}_{phase}"] = {"p50_ms": p50, "p99_ms": p99}
            print(f"{phase:7s} {mode.value:8s} p50 {p50:7.1f} ms   p99 {p99:7.1f} ms", flush=True)
    result["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    plans = await explain(sessions, tenant, kb, "refund invoice for the customer")
    result["keyword_plans"] = plans
    for name, plan in plans.items():
        print(f"--- keyword pass {name}\n{plan}")
    if not keep:
        await drop(sessions, kb)
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
    parser.add_argument("--keep", action="store_true", help="keep the loaded knowledge base")
    args = parser.parse_args()
    asyncio.run(main(args.chunks, args.queries, args.out, args.keep))
