"""Wiki generation in the knowledge worker on the real PostgreSQL and Redis (SPEC T-18):
a ready document of a wiki KB becomes pages; a failed model call is retried, then the
pages are written; every attempt is metered; a tenant over its token budget is paused
with a visible reason and generated once the window allows."""

from __future__ import annotations

import json
import secrets
from typing import Any

import httpx
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from weft_knowledge.tenant_budget import TenantBudget
from weft_knowledge.usage import ModelUsage
from weft_knowledge.wiki_generation import (
    Completion,
    GenerationUsage,
    WikiGenerator,
)
from weft_platform.budgets import BudgetLimits, TokenBudgets
from weft_storage.knowledge.documents import DocumentReader
from weft_storage.knowledge.store import KnowledgeStore
from weft_storage.knowledge.wiki import WikiPages
from weft_storage.knowledge.wiki_issues import WikiGenerations, queue_generation

PAGES = {"pages": [
    {"slug": "stardust", "title": "Stardust", "summary": "A probe.", "page_type": "entity",
     "content": "Stardust returned dust. Built at [[skyvault]]."},
    {"slug": "skyvault", "title": "Skyvault", "summary": "A yard.", "content": "A yard."},
]}  # fmt: skip


class FlakyModel:
    """Fails ``failures`` times, then answers the pages (a scripted model in-process)."""

    def __init__(self, failures: int):
        self.failures = failures
        self.prompts: list[str] = []

    async def complete(self, system: str, user: str) -> Completion:
        self.prompts.append(user)
        if self.failures:
            self.failures -= 1
            raise ConnectionError("model unreachable")
        return Completion(text=json.dumps(PAGES), input_tokens=120, output_tokens=80)


async def _queued(sessions: Any, tenant: str) -> tuple[str, str]:
    store = KnowledgeStore(sessions)
    kb = await store.create_knowledge_base(tenant, "wiki", wiki_enabled=True)
    doc, _ = await store.add_document(tenant, kb, "Mission notes", "Stardust returned dust.")
    async with sessions.begin() as s:
        await queue_generation(s, doc)
    return kb, doc


async def _run_until(generator: WikiGenerator, sessions: Any, doc: str, states: set[str]) -> str:
    """Drive the generator (limited to the test's tenant: a stack's worker sharing the
    database generates its own tenant's only) until our document reaches ``states``."""
    from sqlalchemy import select
    from weft_storage.knowledge.models_wiki import WikiGeneration

    for _ in range(20):
        await generator.generate_next()
        async with sessions() as s:
            status = await s.scalar(
                select(WikiGeneration.status).where(WikiGeneration.document_id == doc)
            )
        if status in states:
            return str(status)
    raise AssertionError(f"document {doc} stayed {status}")


async def test_failed_attempts_are_retried_metered_and_then_written(
    engine: AsyncEngine, infra: dict[str, str]
) -> None:
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    tenant = f"t-{secrets.token_hex(4)}"
    kb, doc = await _queued(sessions, tenant)
    metered: list[dict[str, Any]] = []

    def memory(request: httpx.Request) -> httpx.Response:
        metered.append({"path": request.url.path, **json.loads(request.content)})
        return httpx.Response(204)

    usage = GenerationUsage(
        ModelUsage("http://memory", lambda: "t", transport=httpx.MockTransport(memory))
    )
    model = FlakyModel(failures=1)
    generations, pages = WikiGenerations(sessions), WikiPages(sessions)
    generator = WikiGenerator(
        generations, pages, DocumentReader(sessions), model, usage, retry_base_s=0.0,
        tenants=[tenant],
    )  # fmt: skip
    assert await _run_until(generator, sessions, doc, {"pending", "done"}) == "pending"
    progress = await generations.progress(tenant, kb)
    assert progress["documents"]["pending"] == 1 and "model unreachable" in progress["last_error"]
    assert await _run_until(generator, sessions, doc, {"done"}) == "done"
    assert "WIKI PAGES FOR DOCUMENT: Mission notes" in model.prompts[-1]
    assert "Stardust returned dust." in model.prompts[-1]

    (page,) = await pages.read(tenant, [kb], ["stardust"])
    assert page.source_refs == [{"document_id": doc}]
    assert [link.slug for link in page.outgoing] == ["skyvault"] and page.outgoing[0].exists
    progress = await generations.progress(tenant, kb)
    assert progress["documents"]["done"] == 1 and progress["pages"] == 2
    mine = [m for m in metered if m["tenant_id"] == tenant]
    assert mine == [{"path": f"/internal/usage/model-calls/{doc}.2", "tenant_id": tenant,
                     "source": "wiki", "llm_calls": 1, "input_tokens": 120,
                     "output_tokens": 80}]  # fmt: skip


async def test_a_tenant_over_budget_is_paused_then_generated(
    engine: AsyncEngine, infra: dict[str, str]
) -> None:
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    tenant = f"t-{secrets.token_hex(4)}"
    kb, doc = await _queued(sessions, tenant)
    redis = Redis.from_url(infra["WEFT_REDIS_URL"])
    try:
        budgets, reader = TokenBudgets(redis), DocumentReader(sessions)
        await budgets.spend(tenant, 1000)
        generations = WikiGenerations(sessions)
        over = WikiGenerator(
            generations, WikiPages(sessions), DocumentReader(sessions), FlakyModel(0), None,
            budget=TenantBudget(budgets, BudgetLimits(tokens_per_day=1000), reader),
            tenants=[tenant],
        )  # fmt: skip
        assert await _run_until(over, sessions, doc, {"paused", "done"}) == "paused"
        progress = await generations.progress(tenant, kb)
        assert progress["documents"]["paused"] == 1 and progress["pages"] == 0
        # The worker's queue-depth metric counts it (every tenant's: at least ours).
        depth = await generations.depth()
        assert set(depth) == {"pending", "paused", "generating"} and depth["paused"] >= 1
        assert "tokens per day" in progress["last_error"] and "resumes at" in progress["last_error"]

        from sqlalchemy import update
        from weft_storage.knowledge.models_wiki import WikiGeneration

        async with sessions.begin() as s:  # the window reset (a larger budget, said now)
            await s.execute(
                update(WikiGeneration)
                .where(WikiGeneration.document_id == doc)
                .values(next_attempt_at=WikiGeneration.updated_at)
            )
        under = WikiGenerator(
            generations, WikiPages(sessions), DocumentReader(sessions), FlakyModel(0), None,
            budget=TenantBudget(budgets, BudgetLimits(tokens_per_day=5000), reader),
            tenants=[tenant],
        )  # fmt: skip
        assert await _run_until(under, sessions, doc, {"done"}) == "done"
        assert (await budgets.used(tenant))["tokens_per_day"] == 1200  # 1000 + 200 spent
    finally:
        await redis.aclose()
