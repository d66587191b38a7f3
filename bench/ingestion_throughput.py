"""Ingestion throughput with wiki generation off and on (SPEC T-07 ingestion, T-18).

Runs knowledge's own pipeline in this process against the local PostgreSQL and the
scripted LLM test double (started here, over HTTP, on a free port): ``--docs`` Markdown
documents of ~``--kb`` KB are queued into a KB without a wiki, then into a KB with one;
``--ingest-tasks`` tasks ingest them (parse, chunk, embed through the double's
embeddings) as a worker's ``ingestion_concurrency`` tasks do, and with the wiki on one
more task writes their pages (``WikiGenerator`` over ``ChatPageWriter``, the worker's
path), the double answering each document's pages after ``--llm-delay-ms``.

Reported per run: documents per second until every document is searchable (``ready``),
and with the wiki on until every document's pages are written, with the wall times. The
model's latency decides the wiki's rate (one call per document, one generation task per
worker); ingestion's own rate is what the wiki costs it while both share the process and
the database. Prints and writes ``bench/results/ingestion_throughput.json``; deletes its
knowledge bases (documents, chunks, pages and queue rows go with them).

Not in CI. Run it against a database that no ingestion worker serves (its claims take any
tenant's pending documents, so a live worker would share the work, and this bench would
ingest another tenant's documents)::

    WEFT_DATABASE_URL=postgresql+asyncpg://weft:weft@127.0.0.1:15432/weft_bench \\
    .venv/bin/python bench/ingestion_throughput.py --docs 200 --llm-delay-ms 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import secrets
import socket
import statistics
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import structlog
import uvicorn
from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import machine, save
from weft_knowledge.ingestion import DocumentIngestor
from weft_knowledge.wiki_generation import PROMPT_MARKER, ChatPageWriter, WikiGenerator
from weft_llm import OpenAIChatModel
from weft_scripted_llm.app import create_app
from weft_scripted_llm.settings import Settings
from weft_storage.knowledge.documents import DocumentReader
from weft_storage.knowledge.ingest import IngestionQueue
from weft_storage.knowledge.models import Document, KnowledgeBase
from weft_storage.knowledge.models_wiki import WikiGeneration
from weft_storage.knowledge.store import KnowledgeStore
from weft_storage.knowledge.wiki import WikiPages
from weft_storage.knowledge.wiki_issues import WikiGenerations
from weft_tools.embeddings import OpenAIEmbedder

DEFAULT_URL = "postgresql+asyncpg://weft:weft@127.0.0.1:15432/weft"
PAGES = {"pages": [
    {"slug": "summary", "title": "Summary", "summary": "What the document says.",
     "page_type": "summary", "content": "The document describes [[probe]] telemetry."},
    {"slug": "probe", "title": "Probe", "summary": "A probe.", "page_type": "entity",
     "content": "A probe that sends telemetry."},
]}  # fmt: skip
SENTENCE = "The probe sent telemetry from orbit while the crew checked the relay antenna. "


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def scripted_llm(docs: int, delay_ms: int) -> AsyncIterator[str]:
    """The scripted LLM test double on a free port, scripted with one pages answer per
    document; its base URL."""
    port = free_port()
    config = uvicorn.Config(create_app(Settings(port=port)), port=port, log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=url) as client:
        for _ in range(200):
            try:
                if (await client.get("/healthz")).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)
        step = {"match": PROMPT_MARKER, "content": json.dumps(PAGES), "delay_ms": delay_ms}
        resp = await client.post("/_script", json={"steps": [step] * docs})
        resp.raise_for_status()
    try:
        yield f"{url}/v1"
    finally:
        server.should_exit = True
        await task


async def count(sessions: async_sessionmaker[AsyncSession], stmt: Any) -> int:
    async with sessions() as s:
        return int((await s.execute(stmt)).scalar_one())


async def run(
    sessions: async_sessionmaker[AsyncSession], llm_url: str, args: argparse.Namespace, *,
    wiki: bool, kbs: list[str],
) -> dict[str, Any]:  # fmt: skip
    """One run: queue the documents, ingest them (and write their pages); the timings."""
    tenant = f"bench-{secrets.token_hex(4)}"
    kb = await KnowledgeStore(sessions).create_knowledge_base(tenant, "bench", wiki_enabled=wiki)
    kbs.append(kb)
    queue = IngestionQueue(sessions)
    text = "# Notes\n\n" + SENTENCE * max(1, args.kb * 1024 // len(SENTENCE))
    embedder = OpenAIEmbedder(base_url=llm_url, api_key="scripted-llm-test-double",
                              model="weft-scripted-embedding-test-double")  # fmt: skip
    ingestor = DocumentIngestor(queue, embedder, tenant_max_inflight=args.ingest_tasks)
    chat = OpenAIChatModel(base_url=llm_url, api_key="scripted-llm-test-double")
    generator = WikiGenerator(
        WikiGenerations(sessions), WikiPages(sessions), DocumentReader(sessions),
        ChatPageWriter(chat, "weft-scripted"), None, tenants=[tenant],
    )  # fmt: skip
    ready = select(func.count()).where(Document.knowledge_base_id == kb, Document.status == "ready")
    written = select(func.count()).where(
        WikiGeneration.knowledge_base_id == kb, WikiGeneration.status == "done"
    )
    started = time.perf_counter()
    for i in range(args.docs):
        await queue.enqueue_file(tenant, kb, title=f"Notes {i}", file_name=f"notes-{i}.md",
                                 content=text.encode())  # fmt: skip
    queued_s = time.perf_counter() - started
    marks: dict[str, float] = {}

    async def ingest() -> None:
        while await count(sessions, ready) < args.docs:
            if not await ingestor.ingest_next():
                await asyncio.sleep(0.02)
        marks.setdefault("ready", time.perf_counter() - started)

    async def generate() -> None:
        while await count(sessions, written) < args.docs:
            if not await generator.generate_next():
                await asyncio.sleep(0.02)
        marks["wiki"] = time.perf_counter() - started

    tasks = [ingest() for _ in range(args.ingest_tasks)]
    try:
        await asyncio.gather(*tasks, *([generate()] if wiki else []))
    finally:
        await chat.aclose()
    result: dict[str, Any] = {
        "queue_s": round(queued_s, 2),
        "searchable_s": round(marks["ready"], 2),
        "searchable_docs_per_s": round(args.docs / marks["ready"], 1),
    }
    if wiki:
        result["wiki_done_s"] = round(marks["wiki"], 2)
        result["wiki_docs_per_s"] = round(args.docs / marks["wiki"], 1)
    return result


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the runs."""
    return {key: round(statistics.median(r[key] for r in runs), 2) for key in runs[0]}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=100)
    parser.add_argument("--kb", type=int, default=4, help="Size of one document, in KB.")
    parser.add_argument("--ingest-tasks", type=int, default=2)
    parser.add_argument("--llm-delay-ms", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=2, help="Off/on pairs; medians kept.")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    engine = create_async_engine(os.environ.get("WEFT_DATABASE_URL", DEFAULT_URL))
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    kbs: list[str] = []
    try:
        offs, ons = [], []
        warm = argparse.Namespace(**{**vars(args), "docs": 5})
        async with scripted_llm(5 + args.docs * args.rounds, args.llm_delay_ms) as llm_url:
            await run(sessions, llm_url, warm, wiki=True, kbs=kbs)  # connections, caches
            for _ in range(args.rounds):
                offs.append(await run(sessions, llm_url, args, wiki=False, kbs=kbs))
                ons.append(await run(sessions, llm_url, args, wiki=True, kbs=kbs))
        off, on = medians(offs), medians(ons)
        save("ingestion_throughput", {
            "docs": args.docs, "doc_kb": args.kb, "ingest_tasks": args.ingest_tasks,
            "llm_delay_ms": args.llm_delay_ms, "rounds": args.rounds, **machine(),
            "wiki_off": off, "wiki_on": on,
            "searchable_slowdown_with_wiki": round(
                on["searchable_s"] / off["searchable_s"], 2
            ),
        })  # fmt: skip
    finally:
        async with sessions.begin() as s:  # documents, chunks, pages, queue rows cascade
            await s.execute(delete(KnowledgeBase).where(KnowledgeBase.id.in_(kbs)))
        await engine.dispose()


if __name__ == "__main__":
    asyncio.run(main())
