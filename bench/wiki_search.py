"""``wiki_search`` over 10,000 pages (SPEC T-18): p50/p99 of the storage search as
knowledge runs it (regex and literal, per-KB limit 10), over the trigram index.

Seeds one wiki knowledge base of ``--pages`` pages (bulk inserted, ~1.5 KB each, with
names drawn so that some patterns are rare and some common), runs each pattern
``--queries`` times, prints and writes ``bench/results/wiki_search.json``, then deletes
its rows (the KB, and its pages with it). Not in CI: run by hand against the local
PostgreSQL (``WEFT_DATABASE_URL``, migrated)::

    .venv/bin/python bench/wiki_search.py --pages 10000 --queries 50
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import sys
import time
from pathlib import Path

from sqlalchemy import delete, insert
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from ulid import ULID

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import machine, save, summary
from weft_storage.knowledge.models import KnowledgeBase
from weft_storage.knowledge.models_wiki import WikiPage
from weft_storage.knowledge.wiki import WikiPages
from weft_storage.knowledge.wiki_text import search_text

WORDS = [
    "probe",
    "station",
    "orbit",
    "comet",
    "dust",
    "launch",
    "mission",
    "crew",
    "module",
    "engine",
    "fuel",
    "telemetry",
    "antenna",
    "solar",
    "panel",
    "shield",
    "reactor",
    "cargo",
    "dock",
    "hatch",
    "relay",
    "beacon",
    "survey",
]
DEFAULT_URL = "postgresql+asyncpg://weft:weft@127.0.0.1:15432/weft"
PATTERNS = {
    "regex_rare": ("stardust-7|skyvault-13", True),
    "regex_common": ("comet.*dust", True),
    "regex_anchored_title": ("^name-42", True),
    "literal_rare": ("stardust-7", False),
    "literal_common": ("telemetry", False),
    "literal_missing": ("zzzz-not-there", False),
}


def page(tenant: str, kb: str, i: int, rng: random.Random) -> dict[str, object]:
    name = f"name-{i}"
    extra = " stardust-7" if i % 997 == 0 else (" skyvault-13" if i % 1499 == 0 else "")
    content = " ".join(rng.choice(WORDS) for _ in range(220)) + extra
    summary = f"About {name}: " + " ".join(rng.choice(WORDS) for _ in range(12))
    return {
        "id": f"wp_{ULID()}", "tenant_id": tenant, "knowledge_base_id": kb, "slug": name,
        "title": name.title(), "summary": summary, "content": content, "page_type": "concept",
        "aliases": [], "source_refs": [], "source_document_ids": [], "revision": 1,
        "search_text": search_text(name, name.title(), [], summary, content),
    }  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=50)
    args = parser.parse_args()
    url = os.environ.get("WEFT_DATABASE_URL", DEFAULT_URL)
    engine = create_async_engine(url)
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    tenant, kb = f"bench-{secrets.token_hex(4)}", f"kb_{ULID()}"
    rng = random.Random(7)
    try:
        async with sessions.begin() as s:
            await s.execute(
                insert(KnowledgeBase).values(
                    id=kb, tenant_id=tenant, name="bench", wiki_enabled=True
                )
            )
        started = time.perf_counter()
        for start in range(0, args.pages, 1000):
            rows = [page(tenant, kb, i, rng) for i in range(start, min(args.pages, start + 1000))]
            async with sessions.begin() as s:
                await s.execute(insert(WikiPage), rows)
        seeded_s = time.perf_counter() - started
        async with engine.begin() as conn:
            await conn.exec_driver_sql("ANALYZE wiki_pages")
        pages = WikiPages(sessions)
        report = {}
        for label, (pattern, regex) in PATTERNS.items():
            times, found = [], 0
            for _ in range(args.queries):
                t0 = time.perf_counter()
                hits = await pages.search(tenant, [kb], pattern, regex=regex, limit=10)
                times.append((time.perf_counter() - t0) * 1000)
                found = len(hits)
            report[label] = {**summary(times), "hits": found, "pattern": pattern}
        save(
            "wiki_search",
            {"pages": args.pages, "seed_s": round(seeded_s, 1), "unit": "ms", **machine(),
             "results": report},
        )  # fmt: skip
    finally:
        async with sessions.begin() as s:  # pages, links and revisions go with the KB
            await s.execute(delete(KnowledgeBase).where(KnowledgeBase.id == kb))
        await engine.dispose()


if __name__ == "__main__":
    asyncio.run(main())
