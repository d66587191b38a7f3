"""Entities and relations of a document, read by the LLM (SPEC T-10), in the ingestion
worker and off every request path.

A document of a graph KB is queued for extraction in the transaction that makes it
ready (``weft_storage.knowledge.ingest.queue_graph_extraction``); a worker claims it, asks
the model once per chunk through the same OpenAI-compatible client as the other services
(``weft_llm``), and stores the whole document's answer at once. A model call that fails,
or an answer that is not the JSON asked for or is over its bounds, fails the attempt: it
is retried after a backoff, up to ``max_attempts``, then the extraction is ``failed`` with
the reason (``GET`` of the KB shows it). The tokens of every call, answered or not, are
metered against the tenant (memory's usage, source ``graph``) and spent from its token
budgets; while the tenant is over one, the extraction is ``paused`` until the window
resets (``tenant_budget``), as wiki generation is. When the upload named a session, each
attempt's end goes to that session's notices (``progress_notices``).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import datetime

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from weft_contracts import KnowledgeProgressState
from weft_llm import ChatModel, LLMCallError
from weft_storage.knowledge.graph import (
    MAX_DESCRIPTION,
    MAX_NAME,
    ChunkGraph,
    ExtractedEntity,
    ExtractedRelation,
    ExtractionJob,
    GraphStore,
)

from weft_knowledge.model_call import ask
from weft_knowledge.progress_notices import ProgressNotices, StageCounts
from weft_knowledge.tenant_budget import TenantBudget
from weft_knowledge.usage import ModelUsage

log = structlog.get_logger(__name__)

EXTRACTION_PROMPT = (
    "You build a knowledge graph. Read the passage the user sends and list the named "
    "entities it states facts about (people, organisations, places, products, concepts) "
    "and the relations between them that the passage states. Answer with JSON only: "
    '{"entities": [{"name": "...", "type": "...", "description": "..."}], '
    '"relations": [{"source": "entity name", "relation": "short verb phrase", '
    '"target": "entity name", "description": "..."}]}. Every relation joins two listed '
    'entities. Answer {"entities": [], "relations": []} when the passage names none.'
)
MAX_ANSWER_CHARS = 64 * 1024
"""A longer answer is refused whole (a runaway or hostile model)."""
MAX_ENTITIES = 50
MAX_RELATIONS = 100


class MalformedExtraction(ValueError):
    """The model's answer is not the JSON asked for, or is over a bound."""


class _Entity(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str = Field(min_length=1, max_length=MAX_NAME)
    type: str = Field(default="", max_length=64)
    description: str = Field(default="", max_length=MAX_DESCRIPTION)


class _Relation(BaseModel):
    model_config = ConfigDict(extra="ignore")
    source: str = Field(min_length=1, max_length=MAX_NAME)
    relation: str = Field(min_length=1, max_length=MAX_NAME)
    target: str = Field(min_length=1, max_length=MAX_NAME)
    description: str = Field(default="", max_length=MAX_DESCRIPTION)


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore")
    entities: list[_Entity] = Field(default_factory=list, max_length=MAX_ENTITIES)
    relations: list[_Relation] = Field(default_factory=list, max_length=MAX_RELATIONS)


def parse_answer(chunk_id: str, content: str) -> ChunkGraph:
    """The model's answer for one chunk, validated; :class:`MalformedExtraction` else.
    A fenced block (```json ... ```) is accepted, as models often add one."""
    if len(content) > MAX_ANSWER_CHARS:
        raise MalformedExtraction(f"answer of {len(content):,} characters, over the limit")
    text = content.strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        answer = _Answer.model_validate(json.loads(text))
    except (ValueError, ValidationError, RecursionError) as exc:  # deep nesting: recursion
        reason = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else "not JSON"
        raise MalformedExtraction(f"the model's answer is not the graph JSON ({reason})") from None
    return ChunkGraph(
        chunk_id=chunk_id,
        entities=[ExtractedEntity(name=e.name, entity_type=e.type, description=e.description)
                  for e in answer.entities],
        relations=[ExtractedRelation(source=r.source, target=r.target, relation=r.relation,
                                     description=r.description) for r in answer.relations],
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ExtractionSettings:
    """Model, bounds and retries of graph extraction."""

    model: str
    max_attempts: int = 3
    retry_backoff_s: float = 5.0
    """Delay before attempt n+1 = ``retry_backoff_s * n``."""
    max_chunks: int = 500
    """A document with more chunks is not extracted (``failed`` with the reason)."""
    stall_timeout_s: float = 60.0
    tenants: tuple[str, ...] = ()
    """Only these tenants' documents (workers dedicated to some tenants); empty: all."""


class GraphExtractor:
    """Claims and runs one extraction at a time."""

    def __init__(
        self, store: GraphStore, model: ChatModel, usage: ModelUsage | None,
        settings: ExtractionSettings, *, budget: TenantBudget | None = None,
        notices: ProgressNotices | None = None,
    ):  # fmt: skip
        """``budget``: extraction waits while the tenant is over a token budget and
        spends from it; ``notices``: each attempt's end goes to the upload's session."""
        self._store = store
        self._model = model
        self._usage = usage
        self._settings = settings
        self._budget = budget
        self._notices = notices

    async def extract_next(self) -> bool:
        """Run one due extraction; False when none is waiting."""
        job = await self._store.claim(self._settings.tenants)
        if job is None:
            return False
        if self._budget is not None and (
            pause := await self._budget.over(job.tenant_id, job.document_id)
        ):
            await self._store.pause(job, pause.reason, until=pause.until)
            log.info("graph_extraction_paused", document_id=job.document_id, reason=pause.reason)
            await self._announce(job, "paused", reason=pause.reason, resumes_at=pause.until)
            return True
        tokens = _Tokens()
        try:
            found = await self._extract(job, tokens)
            entities, relations = await self._store.store(job, found)
            log.info("graph_extracted", document_id=job.document_id, entities=entities,
                     relations=relations)  # fmt: skip
        except asyncio.CancelledError:
            raise  # the claim goes stale and another worker takes it over
        except (LLMCallError, MalformedExtraction, TooManyChunks) as exc:
            error = f"{type(exc).__name__}: {exc}"
            last = await self._failed(job, error, final=isinstance(exc, TooManyChunks))
            await self._announce(job, "failed" if last else "retrying", reason=error)
        else:
            await self._announce(job, "done")
        finally:
            await self._meter(job, tokens)
        return True

    async def _announce(
        self,
        job: ExtractionJob,
        state: KnowledgeProgressState,
        *,
        reason: str = "",
        resumes_at: datetime | None = None,
    ) -> None:
        if self._notices is None:
            return

        async def counts() -> StageCounts:
            progress = await self._store.progress(job.tenant_id, job.knowledge_base_id)
            documents = {
                k.removeprefix("documents_"): n
                for k, n in progress.items()
                if k.startswith("documents_")
            }
            return documents, {"entities": progress["entities"], "relations": progress["relations"]}

        await self._notices.announce(
            job, "graph", state, counts, reason=reason, resumes_at=resumes_at
        )

    async def _extract(self, job: ExtractionJob, tokens: _Tokens) -> list[ChunkGraph]:
        chunks = await self._store.chunks(job)
        if len(chunks) > self._settings.max_chunks:
            raise TooManyChunks(
                f"{len(chunks):,} chunks, over the graph extraction limit of "
                f"{self._settings.max_chunks:,} per document"
            )
        found = []
        for chunk in chunks:
            content = await self._ask(chunk.content, tokens)
            found.append(parse_answer(chunk.chunk_id, content))
        return found

    async def _ask(self, passage: str, tokens: _Tokens) -> str:
        tokens.calls += 1
        response = await ask(
            self._model, model=self._settings.model, system=EXTRACTION_PROMPT, user=passage,
            temperature=0.0, max_completion_tokens=2048,
            stall_timeout_s=self._settings.stall_timeout_s,
        )  # fmt: skip
        if response.usage is not None:
            tokens.input += response.usage.prompt_tokens
            tokens.output += response.usage.completion_tokens
        return response.content

    async def _failed(self, job: ExtractionJob, error: str, *, final: bool) -> bool:
        """Record the failed attempt; True when it was the last."""
        last = final or job.attempts >= self._settings.max_attempts
        retry = None if last else self._settings.retry_backoff_s * job.attempts
        log.warning("graph_extraction_failed", document_id=job.document_id,
                    attempt=job.attempts, final=last, error=error)  # fmt: skip
        await self._store.fail(job, error, retry_in_s=retry)
        return last

    async def _meter(self, job: ExtractionJob, tokens: _Tokens) -> None:
        if tokens.calls == 0:
            return
        if self._budget is not None:
            await self._budget.spend(job.tenant_id, tokens.input + tokens.output)
        if self._usage is None:
            return
        await self._usage.record(
            tenant_id=job.tenant_id, source="graph",
            source_id=f"{job.document_id}:{job.attempts}", input_tokens=tokens.input,
            output_tokens=tokens.output, llm_calls=tokens.calls,
        )  # fmt: skip


class TooManyChunks(ValueError):
    """The document is over the extraction's chunk bound (not retried)."""


@dataclass
class _Tokens:
    calls: int = 0
    input: int = 0
    output: int = 0
