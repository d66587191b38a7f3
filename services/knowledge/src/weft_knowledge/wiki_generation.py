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
counts (``GET /internal/knowledge-bases/{kb_id}/wiki``), and, when the upload named a
session, each attempt's end goes to that session's notices (``progress_notices``). Every
attempt's model calls are metered against the tenant through memory (its usage table) and
spent from its token budgets; while the tenant is over one, the document is ``paused``
(``tenant_budget``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import structlog
from pydantic import BaseModel, Field, ValidationError
from weft_contracts import KnowledgeProgressState
from weft_llm import ChatModel
from weft_platform.tasks import cancel_and_wait
from weft_storage.knowledge.documents import DocumentReader
from weft_storage.knowledge.wiki import PageDraft, WikiPages
from weft_storage.knowledge.wiki_issues import GenerationJob, WikiGenerations
from weft_storage.knowledge.wiki_text import InvalidSlug, normalize_slug
from weft_storage.listen import ChannelWakeups, IdlePolls

from weft_knowledge.model_call import ask
from weft_knowledge.progress_notices import ProgressNotices, StageCounts
from weft_knowledge.tenant_budget import TenantBudget
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


class ChatPageWriter:
    """:class:`PageWriterModel` over a ``weft_llm`` chat model (in the worker, the
    OpenAI-compatible client wrapped in ``MeteredModel``, so wiki calls count in the LLM
    metrics like graph extraction's and the engine's)."""

    def __init__(
        self, chat: ChatModel, model: str, *, max_completion_tokens: int = 8192,
        stall_timeout_s: float = 120.0,
    ):  # fmt: skip
        self._chat = chat
        self._model = model
        self._max_tokens = max_completion_tokens
        self._stall_timeout_s = stall_timeout_s

    async def complete(self, system: str, user: str) -> Completion:
        """One completion (streamed, as every ``weft_llm`` call is)."""
        response = await ask(
            self._chat, model=self._model, system=system, user=user, temperature=0.2,
            max_completion_tokens=self._max_tokens, stall_timeout_s=self._stall_timeout_s,
        )  # fmt: skip
        usage = response.usage
        return Completion(
            text=response.content,
            input_tokens=usage.prompt_tokens if usage else 0,
            output_tokens=usage.completion_tokens if usage else 0,
        )


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


class WikiGenerationFailed(Exception):
    """The model's answer could not be used; ``str()`` is the reason shown on the KB."""


class WikiGenerator:
    """Claims queued documents and writes their pages."""

    def __init__(
        self,
        generations: WikiGenerations,
        pages: WikiPages,
        reader: DocumentReader,
        model: PageWriterModel,
        usage: GenerationUsage | None,
        *,
        max_input_chars: int = 24_000,
        retry_base_s: float = 5.0,
        budget: TenantBudget | None = None,
        tenants: Sequence[str] = (),
        notices: ProgressNotices | None = None,
    ):
        """``tenants``: generate only these tenants' documents (empty: every tenant's);
        ``notices``: each attempt's end announced to the upload's session."""
        self._generations = generations
        self._pages = pages
        self._reader = reader
        self._model = model
        self._usage = usage
        self._max_input = max_input_chars
        self._retry_base_s = retry_base_s
        self._budget = budget
        self._tenants = tuple(tenants)
        self._notices = notices

    async def generate_next(self) -> bool:
        """Generate one queued document's pages; False when none is due."""
        job = await self._generations.claim(self._tenants)
        if job is None:
            return False
        if self._budget is not None and (
            pause := await self._budget.over(job.tenant_id, job.document_id)
        ):
            await self._generations.pause(job, pause.reason, until=pause.until)
            log.info("wiki_generation_paused", document_id=job.document_id, reason=pause.reason)
            await self._announce(job, "paused", reason=pause.reason, resumes_at=pause.until)
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
            await self._announce(job, "retrying" if again else "failed", reason=reason)
            return True
        await self._generations.done(job.document_id, written)
        log.info("wiki_generated", document_id=job.document_id, pages=written)
        await self._announce(job, "done")
        return True

    async def _announce(
        self,
        job: GenerationJob,
        state: KnowledgeProgressState,
        *,
        reason: str = "",
        resumes_at: datetime | None = None,
    ) -> None:
        if self._notices is None:
            return

        async def counts() -> StageCounts:
            progress = await self._generations.progress(job.tenant_id, job.knowledge_base_id)
            return progress["documents"], {"pages": progress["pages"]}

        await self._notices.announce(
            job, "wiki", state, counts, reason=reason, resumes_at=resumes_at
        )

    async def _generate(self, job: GenerationJob) -> int:
        text = await self._document_text(job)
        user = f"{PROMPT_MARKER}: {job.title}\n\n{text}"
        completion = await self._model.complete(SYSTEM_PROMPT, user)
        if self._usage is not None:
            await self._usage.record(job, completion)
        if self._budget is not None:
            await self._budget.spend(
                job.tenant_id, completion.input_tokens + completion.output_tokens
            )
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
    """One background task generating queued documents' pages, polling when none is due
    (``poll_s``, doubling while none is, up to ``idle_poll_max_s``) or woken by the
    ingestion channel's ``NOTIFY`` (the worker process's, beside the ingestion tasks)."""

    def __init__(
        self, generator: WikiGenerator, poll_s: float, *, idle_poll_max_s: float | None = None,
        wakeups: ChannelWakeups | None = None,
    ) -> None:  # fmt: skip
        """``wakeups``: the ingestion channel (a document turning ready in a wiki KB, or a
        KB switching its wiki on, notifies it), shared with the ingestion tasks."""
        self._generator = generator
        self._poll_s = poll_s
        self._idle_poll_max_s = poll_s if idle_poll_max_s is None else idle_poll_max_s
        self._wakeups = wakeups
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Start the task."""
        self._tasks = [asyncio.create_task(self._run(), name="wiki-generation")]

    async def stop(self) -> None:
        """Cancel it and wait (a claim in progress is taken over later)."""
        await cancel_and_wait(self._tasks)

    async def _run(self) -> None:
        polls = IdlePolls(self._poll_s, self._idle_poll_max_s, self._wakeups)
        while True:
            try:
                busy = await self._generator.generate_next()
            except asyncio.CancelledError:
                raise
            except Exception:  # the database is down: try again after the poll interval
                log.exception("wiki_generation_poll_failed")
                busy = False
            await polls.after(busy)
