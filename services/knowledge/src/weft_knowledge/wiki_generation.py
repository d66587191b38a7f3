"""Wiki pages written by the model from newly ingested documents (SPEC T-18), in the
ingestion worker, off the request path.

A document of a wiki knowledge base that turns ``ready`` is queued
(``weft_storage.knowledge.wiki_issues.queue_generation``, in the same transaction); a
worker task claims it, gives the model the document's text (its first
``max_input_chars``) and asks for pages as JSON, and writes them with the document as
their source: a page whose slug exists already gets the new text appended and the
document added to its sources. A failure (the model unreachable, an answer that is not
the JSON asked for) goes back to the queue after a growing pause, up to
``MAX_ATTEMPTS``, then stays ``failed`` with its reason; the KB shows the queue's
counts (``GET /internal/knowledge-bases/{kb_id}/wiki``). Every attempt's model calls are
metered against the tenant through memory (its usage table).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

import openai
import structlog
from openai import AsyncOpenAI
from pydantic import BaseModel, Field, ValidationError
from weft_llm import LLMMeter, Usage, llm_error_reason
from weft_llm.openai_model import status_error
from weft_platform.budgets import BudgetLimits, TokenBudgets
from weft_platform.tasks import cancel_and_wait
from weft_storage.knowledge.documents import DocumentReader
from weft_storage.knowledge.wiki import PageDraft, WikiPages
from weft_storage.knowledge.wiki_issues import GenerationJob, WikiGenerations
from weft_storage.knowledge.wiki_text import InvalidSlug, normalize_slug

from weft_knowledge.usage import ModelUsage

log = structlog.get_logger(__name__)

PROMPT_MARKER = "WIKI PAGES FOR DOCUMENT"
"""Opens every generation request (a scripted model in tests matches on it)."""
MAX_PAGES_PER_DOCUMENT = 12
MAX_PAGE_CHARS = 100_000
SYSTEM_PROMPT = (
    "You maintain a wiki built from an organisation's documents. From the document "
    "given, write the wiki pages it supports: one page per important entity or concept, "
    "plus a 'summary' page for the document. Answer with JSON only: "
    '{"pages": [{"slug": "lower-case-words", "title": "...", "summary": "one sentence", '
    '"page_type": "entity|concept|summary", "aliases": ["..."], "content": "Markdown; '
    'link other pages as [[slug]]"}]}. Use only facts from the document.'
)


class GeneratedPage(BaseModel):
    """One page as the model proposes it (checked before it is written)."""

    slug: str = Field(min_length=1, max_length=200)
    title: str = Field(min_length=1, max_length=300)
    summary: str = Field(default="", max_length=2000)
    content: str = Field(max_length=MAX_PAGE_CHARS)
    page_type: str = Field(default="concept", pattern=r"^[a-z][a-z0-9_-]{0,39}$")
    aliases: list[str] = Field(default_factory=list, max_length=20)


class GeneratedPages(BaseModel):
    """The model's whole answer."""

    pages: list[GeneratedPage] = Field(max_length=MAX_PAGES_PER_DOCUMENT)


@dataclass(frozen=True, kw_only=True)
class Completion:
    """A model's answer and what it cost."""

    text: str
    input_tokens: int
    output_tokens: int


class PageWriterModel(Protocol):
    """The model behind the generation (an OpenAI-compatible endpoint in production)."""

    async def complete(self, system: str, user: str) -> Completion:
        """One answer to ``user`` under ``system``."""
        ...


class OpenAIPageWriter:
    """:class:`PageWriterModel` over an OpenAI-compatible endpoint (``openai`` package).
    ``meter``: where each call's duration, tokens or failure go (the worker passes
    ``weft_platform.metrics.LLM_METER``: the ``weft_llm_*`` metrics, by model)."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        timeout_s: float = 120.0,
        meter: LLMMeter | None = None,
        client: AsyncOpenAI | None = None,
    ):
        """``client``: the OpenAI client to use instead of one built from the settings."""
        self._client = client or AsyncOpenAI(
            base_url=base_url, api_key=api_key, max_retries=1, timeout=timeout_s
        )
        self._model = model
        self._meter = meter

    async def complete(self, system: str, user: str) -> Completion:
        """One non-streamed completion."""
        started = time.perf_counter()
        try:
            reply = await self._client.chat.completions.create(
                model=self._model,
                messages=[
                    {"role": "system", "content": system},
                    {"role": "user", "content": user},
                ],
                temperature=0.2,
            )
        except openai.APIStatusError as exc:
            self._failed(llm_error_reason(status_error(exc.status_code, exc.message, exc.code)))
            raise
        except openai.APIConnectionError:  # APITimeoutError included
            self._failed("transient")
            raise
        usage = reply.usage
        completion = Completion(
            text=reply.choices[0].message.content or "",
            input_tokens=usage.prompt_tokens if usage else 0,
            output_tokens=usage.completion_tokens if usage else 0,
        )
        if self._meter is not None:
            self._meter.answered(
                self._model, time.perf_counter() - started, None,
                Usage(prompt_tokens=completion.input_tokens,
                      completion_tokens=completion.output_tokens) if usage else None,
            )  # fmt: skip
        return completion

    def _failed(self, reason: str) -> None:
        if self._meter is not None:
            self._meter.failed(self._model, reason)


class GenerationUsage:
    """Meters a generation attempt's model calls in memory's usage (source ``wiki``),
    through the client every ingestion-time model call uses (:class:`ModelUsage`)."""

    def __init__(self, usage: ModelUsage):
        self._usage = usage

    async def record(self, job: GenerationJob, completion: Completion) -> bool:
        """Meter one attempt (idempotent on document and attempt); False when memory did
        not take it (logged there: usage is reported, never lost silently)."""
        sent: bool = await self._usage.record(
            tenant_id=job.tenant_id, source="wiki", source_id=f"{job.document_id}.{job.attempts}",
            input_tokens=completion.input_tokens, output_tokens=completion.output_tokens,
            llm_calls=1,
        )  # fmt: skip
        return sent

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._usage.aclose()


class TenantBudget:
    """The tenants' token budgets (the engine's Redis counters, SPEC docs/budgets.md):
    generation spends from them and waits while its tenant is over. The limits are the
    deployment's defaults (``WEFT_TOKEN_BUDGET_PER_*``); a tenant's own row is the
    gateway's table, which knowledge does not read."""

    def __init__(self, budgets: TokenBudgets, limits: BudgetLimits):
        self._budgets = budgets
        self._limits = limits

    async def over(self, tenant_id: str) -> tuple[str, datetime] | None:
        """(why, until when) when the tenant is at or over a budget, else None."""
        exceeded = await self._budgets.exceeded(tenant_id, self._limits)
        if exceeded is None:
            return None
        until = datetime.fromtimestamp(exceeded.resets_at, UTC)
        reason = (
            f"paused: the tenant used {exceeded.used} of its {exceeded.limit} "
            f"{exceeded.budget.replace('_', ' ')}; resumes at {until.isoformat()}"
        )
        return reason, until

    async def spend(self, tenant_id: str, completion: Completion) -> None:
        """Count a completion's tokens in the tenant's windows."""
        await self._budgets.spend(tenant_id, completion.input_tokens + completion.output_tokens)


class WikiGenerationFailed(Exception):
    """The model's answer could not be used; ``str()`` is the reason shown on the KB."""


class WikiGenerator:
    """Claims queued documents and writes their pages."""

    def __init__(
        self,
        generations: WikiGenerations,
        pages: WikiPages,
        reader: DocumentReader,
        model: PageWriterModel | None,
        usage: GenerationUsage | None,
        *,
        max_input_chars: int = 24_000,
        retry_base_s: float = 5.0,
        budget: TenantBudget | None = None,
        tenants: Sequence[str] = (),
    ):
        """``tenants``: generate only these tenants' documents (empty: every tenant's)."""
        self._generations = generations
        self._pages = pages
        self._reader = reader
        self._model = model
        self._usage = usage
        self._max_input = max_input_chars
        self._retry_base_s = retry_base_s
        self._budget = budget
        self._tenants = tuple(tenants)

    async def generate_next(self) -> bool:
        """Generate one queued document's pages; False when none is due."""
        job = await self._generations.claim(self._tenants)
        if job is None:
            return False
        if self._budget is not None and (over := await self._budget.over(job.tenant_id)):
            reason, until = over
            await self._generations.pause(job, reason, until=until)
            log.info("wiki_generation_paused", document_id=job.document_id, reason=reason)
            return True
        try:
            written = await self._generate(job)
        except asyncio.CancelledError:
            raise  # the claim goes stale and a worker takes it over
        except Exception as exc:  # the model down, a bad answer: retried, then failed
            reason = str(exc) if isinstance(exc, WikiGenerationFailed) else repr(exc)
            backoff = self._retry_base_s * 2 ** (job.attempts - 1)
            again = await self._generations.failed(job, reason[:1000], backoff_s=backoff)
            log.warning(
                "wiki_generation_failed",
                document_id=job.document_id,
                retry=again,
                error=reason[:300],
            )
            return True
        await self._generations.done(job.document_id, written)
        log.info("wiki_generated", document_id=job.document_id, pages=written)
        return True

    async def _generate(self, job: GenerationJob) -> int:
        if self._model is None:
            raise WikiGenerationFailed("no wiki model is configured (WEFT_WIKI_MODEL)")
        text = await self._document_text(job)
        user = f"{PROMPT_MARKER}: {job.title}\n\n{text}"
        completion = await self._model.complete(SYSTEM_PROMPT, user)
        if self._usage is not None:
            await self._usage.record(job, completion)
        if self._budget is not None:
            await self._budget.spend(job.tenant_id, completion)
        drafts = parse_pages(completion.text, job.document_id)
        for draft in drafts:
            await self._write(job, draft)
        return len(drafts)

    async def _document_text(self, job: GenerationJob) -> str:
        parts, size = [], 0
        for chunk in await self._reader.chunks(job.tenant_id, job.document_id, limit=2000):
            parts.append(chunk.content)
            size += len(chunk.content)
            if size >= self._max_input:
                break
        return "\n\n".join(parts)[: self._max_input]

    async def _write(self, job: GenerationJob, draft: PageDraft) -> None:
        found = await self._pages.read(job.tenant_id, [job.knowledge_base_id], [draft.slug])
        if found:  # another document wrote it: add this one's text and source
            page = found[0]
            content = page.content
            if draft.content and draft.content not in content:
                content = f"{content}\n\n{draft.content}"[:MAX_PAGE_CHARS]
            draft = PageDraft(
                slug=page.slug,
                title=page.title,
                summary=page.summary or draft.summary,
                content=content,
                page_type=page.page_type,
                aliases=list(dict.fromkeys([*page.aliases, *draft.aliases]))[:20],
                source_refs=[*page.source_refs, *draft.source_refs],
            )
        await self._pages.write(job.tenant_id, job.knowledge_base_id, draft, "ingestion")


def parse_pages(text: str, document_id: str) -> list[PageDraft]:
    """The pages of the model's answer (JSON, possibly fenced), each with the document as
    its source; :class:`WikiGenerationFailed` when it is not what was asked for. A page
    with an invalid slug is skipped, not the whole answer."""
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    try:
        parsed = GeneratedPages.model_validate(json.loads(body))
    except (ValueError, ValidationError) as exc:
        raise WikiGenerationFailed(f"the model's answer is not the pages' JSON: {exc}") from None
    drafts: dict[str, PageDraft] = {}
    for page in parsed.pages:
        try:
            slug = normalize_slug(page.slug)
        except InvalidSlug:
            continue
        drafts[slug] = PageDraft(
            slug=slug,
            title=page.title,
            summary=page.summary,
            content=page.content,
            page_type=page.page_type,
            aliases=[a[:200] for a in page.aliases if a],
            source_refs=[{"document_id": document_id}],
        )
    return list(drafts.values())


class WikiGenerationLoop:
    """One background task generating queued documents' pages, polling ``poll_s`` when
    none is due (the worker process's, beside the ingestion tasks)."""

    def __init__(self, generator: WikiGenerator, poll_s: float):
        self._generator = generator
        self._poll_s = poll_s
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Start the task."""
        self._tasks = [asyncio.create_task(self._run(), name="wiki-generation")]

    async def stop(self) -> None:
        """Cancel it and wait (a claim in progress is taken over later)."""
        await cancel_and_wait(self._tasks)

    async def _run(self) -> None:
        while True:
            try:
                busy = await self._generator.generate_next()
            except asyncio.CancelledError:
                raise
            except Exception:  # the database is down: try again after the poll interval
                log.exception("wiki_generation_poll_failed")
                busy = False
            if not busy:
                await asyncio.sleep(self._poll_s)
