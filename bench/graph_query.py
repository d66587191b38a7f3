"""``query_knowledge_graph``'s per-KB work on 10,000 entities (SPEC T-10): p50/p99 of what
knowledge's graph route runs for one KB (entity match by name, relations with their
source chunks, the recursive path between two matched entities, then the text hits).

Seeds a fresh tenant's graph KB in the local PostgreSQL (``WEFT_DATABASE_URL``, migrated):
``--entities`` entities over ``--documents`` documents of 10 chunks, ``--relations``
relations whose ends follow a skewed draw (a few hub entities hold many relations, as
real graphs do), then runs ``--queries`` queries of four kinds after a warm-up (each
timed whole, and its graph part alone as ``<kind>.graph_only``): an
entity's exact name, a question naming one entity, a question naming two (the path
search runs when no direct relation joins them) and a question naming none. Prints
p50/p99 (ms) per kind with the load average, writes ``bench/results/graph_query.json``
and deletes its rows (the KB, whose deletion cascades to everything it holds). Not in CI.

    WEFT_DATABASE_URL=... .venv/bin/python bench/graph_query.py
"""

from __future__ import annotations

import argparse
import asyncio
import random
import secrets
import time
from typing import Any

from benchlib import machine, save, summary
from sqlalchemy import delete, insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from weft_storage.knowledge.graph import GraphStore, normalize_name
from weft_storage.knowledge.models import Chunk, Document, KnowledgeBase
from weft_storage.knowledge.models_graph import GraphEntity, GraphMention, GraphRelation
from weft_storage.knowledge.store import KnowledgeStore
from weft_testkit import infra_env

WORDS = [
    "amber",
    "basalt",
    "cobalt",
    "dune",
    "ember",
    "fjord",
    "garnet",
    "harbor",
    "indigo",
    "juniper",
    "kestrel",
    "lumen",
    "meridian",
    "nimbus",
    "onyx",
    "prairie",
    "quartz",
    "raven",
    "sierra",
    "tundra",
    "umber",
    "vesper",
    "willow",
    "xenon",
    "yarrow",
    "zephyr",
]


def _name(i: int) -> str:
    rng = random.Random(i)
    return f"{rng.choice(WORDS).title()} {rng.choice(WORDS).title()} {i}"


async def _seed(
    sessions: async_sessionmaker[AsyncSession], tenant: str, kb: str, args: argparse.Namespace
) -> tuple[list[str], list[tuple[int, int]]]:
    rng = random.Random(7)
    names = [_name(i) for i in range(args.entities)]
    chunks: list[tuple[str, str]] = []
    async with sessions.begin() as s:
        for d in range(args.documents):
            doc = f"doc_bench_{tenant}_{d}"
            await s.execute(
                insert(Document).values(
                    id=doc, tenant_id=tenant, knowledge_base_id=kb, title=f"Doc {d}",
                    chunk_count=10,
                )
            )  # fmt: skip
            rows = []
            for p in range(10):
                cid = f"chk_bench_{tenant}_{d}_{p}"
                mentioned = rng.sample(range(args.entities), 5)
                text = " ".join(names[m] for m in mentioned) + " work together on projects."
                rows.append({"id": cid, "tenant_id": tenant, "knowledge_base_id": kb,
                             "document_id": doc, "position": p, "content": text})  # fmt: skip
                chunks.append((cid, doc))
            await s.execute(insert(Chunk), rows)
        ids = [f"ent_bench_{tenant}_{i}" for i in range(args.entities)]
        await s.execute(insert(GraphEntity), [
            {"id": ids[i], "tenant_id": tenant, "knowledge_base_id": kb, "name": names[i],
             "normalized_name": normalize_name(names[i]), "entity_type": "thing"}
            for i in range(args.entities)
        ])  # fmt: skip
        await s.execute(insert(GraphMention), [
            {"entity_id": ids[i], "chunk_id": chunks[i % len(chunks)][0], "tenant_id": tenant,
             "knowledge_base_id": kb, "document_id": chunks[i % len(chunks)][1]}
            for i in range(args.entities)
        ])  # fmt: skip
        pairs = []
        for _ in range(args.relations):
            # Pareto-skewed ends: entity 0..9 are hubs with hundreds of relations.
            a = min(int(rng.paretovariate(1.2)) - 1, args.entities - 1)
            b = rng.randrange(args.entities)
            if a != b:
                pairs.append((a, b))
        await s.execute(insert(GraphRelation), [
            {"id": f"rel_bench_{tenant}_{n}", "tenant_id": tenant, "knowledge_base_id": kb,
             "source_entity_id": ids[a], "target_entity_id": ids[b], "relation": "works with",
             "chunk_id": chunks[n % len(chunks)][0], "document_id": chunks[n % len(chunks)][1]}
            for n, (a, b) in enumerate(pairs)
        ])  # fmt: skip
    return names, pairs


def _queries(names: list[str], rng: random.Random, n: int) -> list[tuple[str, str]]:
    kinds: list[tuple[str, str]] = []
    for i in range(n):
        a, b = rng.choice(names), rng.choice(names)
        kind = ("exact", "question", "two_entities", "miss")[i % 4]
        text = {
            "exact": a,
            "question": f"What do we know about {a} and its partners?",
            "two_entities": f"How is {a} related to {b}?",
            "miss": "What is the refund policy for annual plans?",
        }[kind]
        kinds.append((kind, text))
    return kinds


async def main(args: argparse.Namespace) -> None:
    engine = create_async_engine(infra_env()["WEFT_DATABASE_URL"])
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    tenant = f"bench-graph-{secrets.token_hex(3)}"
    store, graph = KnowledgeStore(sessions), GraphStore(sessions)
    kb = await store.create_knowledge_base(tenant, "bench graph", graph_enabled=True)
    try:
        started = time.perf_counter()
        names, pairs = await _seed(sessions, tenant, kb, args)
        seeded_s = time.perf_counter() - started
        rng = random.Random(11)
        for _, text in _queries(names, rng, 40):  # warm-up
            await graph.query(tenant, kb, text)
        timings: dict[str, list[float]] = {}
        matched: dict[str, int] = {}
        for kind, text in _queries(names, rng, args.queries):
            t0 = time.perf_counter()
            hits = await graph.query(tenant, kb, text)
            t1 = time.perf_counter()
            await store.keyword_search(tenant, [kb], text, 5)
            t2 = time.perf_counter()
            timings.setdefault(kind, []).append((t2 - t0) * 1000)
            timings.setdefault(f"{kind}.graph_only", []).append((t1 - t0) * 1000)
            matched[kind] = matched.get(kind, 0) + bool(hits.relations or hits.path)
        result: dict[str, Any] = {
            "entities": args.entities, "relations": len(pairs), "chunks": args.documents * 10,
            "seed_s": round(seeded_s, 1), "machine": machine(),
            "ms": {kind: summary(values) for kind, values in timings.items()},
            "queries_with_relations": matched,
        }  # fmt: skip
        save("graph_query", result)
    finally:
        async with sessions.begin() as s:
            await s.execute(delete(KnowledgeBase).where(KnowledgeBase.id == kb))
        await engine.dispose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entities", type=int, default=10_000)
    parser.add_argument("--relations", type=int, default=30_000)
    parser.add_argument("--documents", type=int, default=200)
    parser.add_argument("--queries", type=int, default=400)
    asyncio.run(main(parser.parse_args()))
