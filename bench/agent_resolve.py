"""agent-config resolve latency (SPEC A-05, A-07, A-10): what one chat turn pays before
it is published, for a built-in agent, a tenant's own agent with a selected knowledge base
(KB capability guard + placeholder names) and an agent shared from another tenant (share
lookup + owner's definition + guard on the owner's KB).

Runs ``AgentResolver`` in-process on the real PostgreSQL of ``WEFT_DATABASE_URL`` (seeds
its own tenants, organisation and KB with random ids), sequential calls after a warm-up.
Prints p50/p99 and writes ``bench/results/agent_resolve.json``.

    .venv/bin/python bench/agent_resolve.py --calls 300
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from weft_agent_config.catalogs import BuiltinAgents
from weft_agent_config.definition import AgentDefinition
from weft_agent_config.knowledge_client import KnowledgeService
from weft_agent_config.knowledge_guard import KnowledgeDirectory
from weft_agent_config.model_capabilities import ModelCapabilities
from weft_agent_config.resolver import AgentResolver
from weft_agent_config.sharing import SharingStore
from weft_agent_config.store import AgentStore
from weft_knowledge.api import knowledge_router
from weft_knowledge.search import KnowledgeSearch
from weft_knowledge.titles import KnowledgeDirectory as KnowledgeTables
from weft_knowledge.usage import DocumentUsage
from weft_storage.knowledge.documents import DocumentReader
from weft_storage.knowledge.ingest import IngestionQueue
from weft_storage.knowledge.store import KnowledgeStore

REPO = Path(__file__).resolve().parents[1]
DEFAULT_URL = "postgresql+asyncpg://weft:weft@127.0.0.1:15432/weft"


async def _measure(call: Callable[[], Awaitable[object]], calls: int) -> dict[str, float]:
    for _ in range(20):
        await call()
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return {
        "p50_ms": round(samples[len(samples) // 2], 2),
        "p99_ms": round(samples[min(len(samples) - 1, int(0.99 * len(samples)))], 2),
    }


def knowledge_in_process(sessions: async_sessionmaker[AsyncSession]) -> KnowledgeService:
    """agent-config's client of a knowledge service running in this process (the hop's
    HTTP and JSON are measured, not a network)."""
    store, reader = KnowledgeStore(sessions), DocumentReader(sessions)
    app = FastAPI()
    app.include_router(
        knowledge_router(
            store, reader, IngestionQueue(sessions), KnowledgeSearch(store, reader),
            DocumentUsage("http://memory.invalid", lambda: ""), KnowledgeTables(sessions),
            document_wait_s=0,
        )
    )  # fmt: skip
    return KnowledgeService("http://knowledge", lambda _: "", transport=httpx.ASGITransport(app))


async def main(calls: int) -> dict[str, object]:
    engine = create_async_engine(os.environ.get("WEFT_DATABASE_URL", DEFAULT_URL))
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    owner, recipient = f"bench-o-{secrets.token_hex(4)}", f"bench-r-{secrets.token_hex(4)}"
    store, sharing = AgentStore(sessions), SharingStore(sessions)
    resolver = AgentResolver(
        store, BuiltinAgents.load(), "weft-scripted", models=ModelCapabilities.load(),
        knowledge=KnowledgeDirectory(knowledge_in_process(sessions)), sharing=sharing,
    )  # fmt: skip
    kb = await KnowledgeStore(sessions).create_knowledge_base(owner, "bench kb", "for the bench")
    agent = AgentDefinition.model_validate(
        {"name": "bench", "model": "weft-scripted", "rerank_model_id": "r",
         "allowed_tools": ["search_knowledge"], "kb_selection_mode": "selected",
         "knowledge_base_ids": [kb], "reasoning_effort": "max",
         "system_prompt": "Sources: {{knowledge_bases}}"}
    )  # fmt: skip
    stored = await store.create(owner, "bench", agent)
    org = await sharing.create_organisation("bench")
    await sharing.set_member(org, owner, "editor")
    await sharing.set_member(org, recipient, "viewer")
    await sharing.share(owner, stored.id, org, "bench")
    results = {
        "builtin": await _measure(
            lambda: resolver.resolve(owner, "builtin-smart-reasoning"), calls
        ),
        "own_agent_selected_kb": await _measure(lambda: resolver.resolve(owner, stored.id), calls),
        "shared_agent": await _measure(lambda: resolver.resolve(recipient, stored.id), calls),
    }
    await engine.dispose()
    return {"calls_per_case": calls, "load_average": os.getloadavg(), "results": results}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    report = asyncio.run(main(args.calls))
    print(json.dumps(report, indent=2))
    out = REPO / "bench" / "results" / "agent_resolve.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
