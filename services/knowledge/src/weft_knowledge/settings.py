"""knowledge settings (environment, prefix ``WEFT_``): the service and its ingestion
workers read the same class (``python -m weft_knowledge`` and ``... worker``)."""

from __future__ import annotations

from pydantic import AliasChoices, Field
from weft_platform.budgets import TokenBudgetSettings
from weft_platform.settings import ModelClientSettings
from weft_tools.ingestion_limits import IngestionLimits


class KnowledgeSettings(ModelClientSettings, TokenBudgetSettings):
    """knowledge settings (the model client's: graph extraction and wiki pages at
    ingestion; the token budgets wiki generation spends from)."""

    service_name: str = "knowledge"
    http_port: int = 8088
    memory_url: str = Field(
        default="http://127.0.0.1:8085",
        description="memory (WEFT_MEMORY_URL): ingested documents are metered there.",
    )
    memory_timeout_s: float = Field(default=10.0, gt=0, description="One usage call to memory.")
    document_wait_s: float = Field(
        default=10.0,
        ge=0,
        le=120,
        description="Longest wait of a text document posted as JSON for its ingestion "
        "(the gateway's WEFT_DOCUMENT_WAIT_S caps what a caller asks; this caps the gateway).",
    )
    max_body_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1024,
        description="Largest internal request body (an uploaded file; the gateway's own "
        "limit is the public one).",
    )
    embedding_base_url: str = Field(
        default="http://127.0.0.1:8090/v1",
        validation_alias=AliasChoices("WEFT_EMBEDDING_BASE_URL", "OPENAI_BASE_URL"),
    )
    embedding_api_key: str = Field(
        default="scripted-llm-test-double",
        validation_alias=AliasChoices("WEFT_EMBEDDING_API_KEY", "OPENAI_API_KEY"),
    )
    embedding_model: str = Field(
        default="weft-scripted-embedding-test-double", description="Empty: no vectors."
    )
    embedding_dimensions: int | None = None
    rerank_base_url: str = Field(default="", description="Optional rerank model endpoint.")
    rerank_model: str = ""
    rerank_api_key: str = ""
    ingestion_poll_s: float = Field(
        default=1.0, gt=0, description="Wait before the next queue poll after one found work."
    )
    ingestion_idle_poll_max_s: float = Field(
        default=15.0,
        gt=0,
        description=(
            "Longest wait between polls of idle queues: the wait doubles from"
            " ingestion_poll_s while polls find nothing. Queued work wakes the workers at"
            " once (NOTIFY); the poll only finds retries coming due, stale claims and"
            " tenants back under budget."
        ),
    )
    ingestion_concurrency: int = Field(
        default=2, ge=1, le=16, description="Documents one worker process ingests at once."
    )
    ingestion_tenant_max_inflight: int = Field(
        default=1,
        ge=1,
        description="Documents one tenant has in ingestion at once across every worker "
        "(a soft cap: see IngestionQueue.claim).",
    )
    ingestion_stale_after_s: float = Field(
        default=300.0,
        gt=0,
        description="A claim this old (its worker died) is taken over by another worker.",
    )
    ingestion_max_decompressed_mb: int = Field(
        default=64, ge=1, description="What a zip-based file (xlsx) may inflate to."
    )
    ingestion_max_rows: int = Field(default=100_000, ge=1, description="Rows of one table.")
    ingestion_max_pages: int = Field(default=2_000, ge=1, description="Pages of one PDF.")
    ingestion_max_text_chars: int = Field(
        default=50_000_000, ge=1, description="Characters of text of one document."
    )
    ingestion_max_chunks: int = Field(default=20_000, ge=1, description="Chunks of one document.")
    ingestion_tenant_max_chunks: int = Field(
        default=2_000_000, ge=1, description="Chunks of all of one tenant's documents."
    )

    graph_model: str = Field(
        default="", description="Model of graph extraction (SPEC T-10); empty: WEFT_LLM_MODEL."
    )
    graph_max_attempts: int = Field(default=3, ge=1, le=20, description="Tries per document.")
    graph_retry_backoff_s: float = Field(
        default=5.0, ge=0, description="Wait before try n+1 of an extraction: this times n."
    )
    graph_max_chunks: int = Field(
        default=500, ge=1, description="A document with more chunks is not graph-extracted."
    )
    wiki_model: str = Field(
        default="", description="Model of wiki pages (SPEC T-18); empty: WEFT_LLM_MODEL."
    )
    wiki_max_input_chars: int = Field(
        default=24_000, ge=1000, description="Text of one document the model reads."
    )
    wiki_max_completion_tokens: int = Field(
        default=8192,
        ge=256,
        le=200_000,
        description="Longest answer (the pages of one document) asked of the model; within "
        "what the model accepts.",
    )
    worker_tenants: str = Field(
        default="",
        validation_alias=AliasChoices(
            "WEFT_KNOWLEDGE_WORKER_TENANTS", "WEFT_WIKI_TENANTS", "WEFT_GRAPH_TENANTS"
        ),
        description="Comma-separated tenants whose wiki pages, knowledge graphs and FAQ "
        "embeddings this "
        "worker makes (workers dedicated to some tenants); empty: every tenant's. "
        "WEFT_WIKI_TENANTS and WEFT_GRAPH_TENANTS, the former names, are read when it is "
        "unset (in that order).",
    )
    wiki_retry_base_s: float = Field(
        default=5.0, gt=0, description="Pause before a failed generation's 2nd attempt (x2 each)."
    )

    def tenants(self) -> tuple[str, ...]:
        """``worker_tenants`` as a tuple (empty: every tenant's)."""
        return tuple(t.strip() for t in self.worker_tenants.split(",") if t.strip())

    def ingestion_limits(self) -> IngestionLimits:
        """The per-document and per-tenant bounds of ingestion."""
        return IngestionLimits(
            max_decompressed_bytes=self.ingestion_max_decompressed_mb * 1024 * 1024,
            max_rows=self.ingestion_max_rows,
            max_pages=self.ingestion_max_pages,
            max_text_chars=self.ingestion_max_text_chars,
            max_chunks=self.ingestion_max_chunks,
            tenant_max_chunks=self.ingestion_tenant_max_chunks,
        )
