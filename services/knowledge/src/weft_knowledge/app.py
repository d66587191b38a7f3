"""App factories of knowledge: the service (``python -m weft_knowledge``: internal routes
over knowledge bases, documents, chunks and search) and the ingestion worker
(``python -m weft_knowledge worker``: drains the ingestion queue, reports its depth).

knowledge owns ``knowledge_bases``, ``documents``, ``document_files``, ``chunks`` and the
graph tables (``weft_storage.ownership``); the gateway, tool-exec and agent-config ask it over HTTP.
"""

from __future__ import annotations

from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import Topic
from weft_llm import ChatModel, MeteredModel, OpenAIChatModel
from weft_platform.app import create_service_app, init_logging
from weft_platform.body_limit import BodyLimit
from weft_platform.budgets import TokenBudgets
from weft_platform.credentials import RECORDS
from weft_platform.internal_auth import InternalAuth
from weft_platform.metrics import LLM_METER
from weft_platform.record_credentials import record_scope
from weft_platform.runtime import ServiceRuntime, create_runtime
from weft_storage.knowledge.documents import DocumentReader
from weft_storage.knowledge.faq import FaqStore
from weft_storage.knowledge.faq_jobs import FaqEmbeddingQueue
from weft_storage.knowledge.graph import GraphStore
from weft_storage.knowledge.ingest import INGESTION_CHANNEL, IngestionQueue
from weft_storage.knowledge.store import KnowledgeStore
from weft_storage.knowledge.wiki import WikiPages
from weft_storage.knowledge.wiki_issues import WikiGenerations, WikiIssues
from weft_storage.listen import ChannelWakeups
from weft_storage.owner_purge import owner_purge_router
from weft_tools.embeddings import Embedder, OpenAIEmbedder
from weft_tools.ranking import HttpRerankModel

from weft_knowledge.api import SYSTEM_ROUTES, knowledge_router
from weft_knowledge.faq_embedding import FaqEmbedder, FaqEmbeddingSettings
from weft_knowledge.graph_extraction import ExtractionSettings, GraphExtractor
from weft_knowledge.ingestion import DocumentIngestor
from weft_knowledge.ingestion_loop import IngestionLoop
from weft_knowledge.progress_notices import ProgressNotices
from weft_knowledge.search import KnowledgeSearch
from weft_knowledge.settings import KnowledgeSettings
from weft_knowledge.tenant_budget import TenantBudget
from weft_knowledge.titles import KnowledgeDirectory
from weft_knowledge.usage import USAGE_WRITE_SCOPE, DocumentUsage, ModelUsage
from weft_knowledge.wiki_api import WIKI_SYSTEM_ROUTES, wiki_router
from weft_knowledge.wiki_generation import (
    ChatPageWriter,
    GenerationUsage,
    WikiGenerationLoop,
    WikiGenerator,
)

AUDIENCE = "knowledge"
ISSUER = "knowledge"
"""The issuer of knowledge's own service credentials (usage sent to memory)."""

__all__ = ["KnowledgeSettings", "create_app", "create_worker_app"]


def embedder_of(settings: KnowledgeSettings) -> Embedder | None:
    """The embedding model (None: no vectors; searches fall back to keyword)."""
    if not settings.embedding_model:
        return None
    return OpenAIEmbedder(
        base_url=settings.embedding_base_url,
        api_key=settings.embedding_api_key,
        model=settings.embedding_model,
        dimensions=settings.embedding_dimensions,
    )


def wiki_stores(
    sessions: async_sessionmaker[AsyncSession],
) -> tuple[WikiPages, WikiIssues, WikiGenerations]:
    """The wiki's pages, issues and generation queue (SPEC T-18)."""
    return WikiPages(sessions), WikiIssues(sessions), WikiGenerations(sessions)


def create_app(settings: KnowledgeSettings | None = None) -> FastAPI:
    """The internal API: knowledge bases, documents (queued for the workers), search."""
    s = settings or KnowledgeSettings()
    runtime = create_runtime(s)
    init_logging(runtime)
    signer = runtime.signer(ISSUER)
    usage = DocumentUsage(
        s.memory_url,
        lambda: signer.service("memory", [USAGE_WRITE_SCOPE]),
        timeout_s=s.memory_timeout_s,
    )
    reranker = None
    if s.rerank_base_url:
        reranker = HttpRerankModel(
            base_url=s.rerank_base_url, model=s.rerank_model, api_key=s.rerank_api_key
        )
    store = KnowledgeStore(runtime.sessions)
    reader = DocumentReader(runtime.sessions)
    faq = FaqStore(runtime.sessions)
    embedder = embedder_of(s)
    search = KnowledgeSearch(store, reader, embedder=embedder, reranker=reranker, faq=faq)
    router = knowledge_router(
        store,
        reader,
        IngestionQueue(runtime.sessions, stale_after_s=s.ingestion_stale_after_s),
        search,
        usage,
        KnowledgeDirectory(runtime.sessions, embeds=bool(s.embedding_model)),
        GraphStore(runtime.sessions),
        document_wait_s=s.document_wait_s,
        faq=faq,
        embedder=embedder,
        limits=s.ingestion_limits(),
    )
    app = create_service_app(
        runtime,
        title="weft knowledge",
        routers=[router, wiki_router(store, reader, *wiki_stores(runtime.sessions))],
        internal=InternalAuth(runtime.verifier, AUDIENCE, {**SYSTEM_ROUTES, **WIKI_SYSTEM_ROUTES}),
        on_shutdown=[usage.aclose],
    )
    app.add_middleware(BodyLimit, max_bytes=s.max_body_bytes)
    # The gateway's tenant and user purges (weft_storage.owner_purge): knowledge deletes its
    # own tables' rows; nothing else may.
    app.include_router(owner_purge_router(AUDIENCE, runtime.sessions, runtime.verifier))
    return app


def wiki_generation(
    runtime: ServiceRuntime, s: KnowledgeSettings, chat: ChatModel, usage: ModelUsage,
    budget: TenantBudget, notices: ProgressNotices, wakeups: ChannelWakeups,
) -> WikiGenerationLoop:  # fmt: skip
    """The worker's wiki generation task (SPEC T-18), metering through ``usage`` and woken
    by the ingestion channel's ``wakeups``."""
    generator = WikiGenerator(
        WikiGenerations(runtime.sessions),
        WikiPages(runtime.sessions),
        DocumentReader(runtime.sessions),
        ChatPageWriter(
            chat, s.wiki_model or s.llm_model, max_completion_tokens=s.wiki_max_completion_tokens
        ),
        GenerationUsage(usage),
        max_input_chars=s.wiki_max_input_chars,
        retry_base_s=s.wiki_retry_base_s,
        budget=budget,
        tenants=s.tenants(),
        notices=notices,
    )
    return WikiGenerationLoop(
        generator, s.ingestion_poll_s, idle_poll_max_s=s.ingestion_idle_poll_max_s,
        wakeups=wakeups,
    )  # fmt: skip


def create_worker_app(settings: KnowledgeSettings | None = None) -> FastAPI:
    """An ingestion worker: ``ingestion_concurrency`` tasks claiming documents fairly
    across tenants (``IngestionQueue.claim``), woken by the queue's ``NOTIFY``; health
    routes and the queue-depth gauge (``weft_ingestion_queue_depth``, what autoscaling
    reads), no internal API."""
    s = settings or KnowledgeSettings(service_name="knowledge-worker")
    runtime = create_runtime(s)
    init_logging(runtime)
    queue = IngestionQueue(runtime.sessions, stale_after_s=s.ingestion_stale_after_s)
    embedder = embedder_of(s)
    ingestor = DocumentIngestor(
        queue,
        embedder,
        limits=s.ingestion_limits(),
        tenant_max_inflight=s.ingestion_tenant_max_inflight,
    )
    signer = runtime.signer(ISSUER)
    usage = ModelUsage(
        s.memory_url,
        lambda: signer.service("memory", [USAGE_WRITE_SCOPE]),
        timeout_s=s.memory_timeout_s,
    )
    # One metered client for every ingestion-time model call: wiki and graph calls are
    # counted in the LLM metrics (weft_llm_*) as the engine's are.
    chat = MeteredModel(
        OpenAIChatModel(base_url=s.openai_base_url, api_key=s.openai_api_key), LLM_METER
    )
    reader = DocumentReader(runtime.sessions)
    budget = TenantBudget(TokenBudgets(runtime.redis), s.budget_defaults(), reader)
    notices = ProgressNotices(
        runtime.bus, reader, lambda: signer.service(RECORDS, [record_scope(Topic.SESSION_NOTICES)])
    )
    graph_store = GraphStore(runtime.sessions, stale_after_s=s.ingestion_stale_after_s)
    graph = GraphExtractor(
        graph_store,
        chat,
        usage,
        ExtractionSettings(
            model=s.graph_model or s.llm_model,
            max_attempts=s.graph_max_attempts,
            retry_backoff_s=s.graph_retry_backoff_s,
            max_chunks=s.graph_max_chunks,
            tenants=s.tenants(),
        ),
        budget=budget,
        notices=notices,
    )
    faq = None
    if embedder is not None:  # without one, FAQ writes queue no job (keyword search only)
        faq = FaqEmbedder(
            FaqEmbeddingQueue(runtime.sessions, stale_after_s=s.ingestion_stale_after_s),
            embedder,
            usage,
            # Model calls, like wiki and graph work: dedicated workers embed their tenants'.
            FaqEmbeddingSettings(
                tenant_max_inflight=s.ingestion_tenant_max_inflight, tenants=s.tenants()
            ),
        )
    wakeups = ChannelWakeups(runtime.db, INGESTION_CHANNEL)
    loop = IngestionLoop(
        ingestor,
        s.ingestion_poll_s,
        idle_poll_max_s=s.ingestion_idle_poll_max_s,
        graph=graph,
        faq=faq,
        concurrency=s.ingestion_concurrency,
        wakeups=wakeups,
        depth=queue.depth if s.effective_metrics_port else None,
        job_depths={"wiki": WikiGenerations(runtime.sessions).depth, "graph": graph_store.depth},
    )
    wiki = wiki_generation(runtime, s, chat, usage, budget, notices, wakeups)
    app = create_service_app(
        runtime,
        title="weft knowledge worker",
        on_startup=[loop.start, wiki.start],
        on_shutdown=[loop.stop, wiki.stop, usage.aclose],
    )
    app.state.ingestion = loop
    return app
