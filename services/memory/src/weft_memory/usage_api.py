"""``GET /internal/usage``: a tenant's metered usage per user or per agent over a period
(``weft_storage.usage.usage_totals``), for the operator's admin API; and
``PUT /internal/usage/documents/{document_id}``: an ingested document metered, for the
knowledge service (which owns documents; usage is memory's).

Both are system routes: they name any tenant, so they want a service credential with
their scope (``memory:usage.read``: the gateway's admin API or an operator;
``memory:usage.write``: the knowledge service, or an operator), never a tenant's request credential.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Path, Query, Response
from pydantic import AwareDatetime, BaseModel, Field
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts.usage import UsageGroup, UsageTotals
from weft_platform.internal_auth import SystemRoute
from weft_storage.memory.usage import record_document, record_model_calls, usage_totals

USAGE_ROUTE = "/internal/usage"
USAGE_SCOPE = SystemRoute("memory:usage.read", frozenset({"gateway", "operator"}))
MAX_PERIOD = timedelta(days=366)
DOCUMENT_USAGE_ROUTE = "/internal/usage/documents/{document_id}"
DOCUMENT_USAGE_SCOPE = SystemRoute("memory:usage.write", frozenset({"knowledge", "operator"}))
MODEL_USAGE_ROUTE = "/internal/usage/model-calls/{source_id}"
"""Model calls a service makes outside turns (knowledge's graph extraction, wiki
generation, FAQ embeddings), same scope."""


class DocumentUsage(BaseModel):
    """Body of ``PUT /internal/usage/documents/{document_id}``: whose document, its size."""

    tenant_id: str = Field(min_length=1, max_length=128)
    user_id: str = Field(default="", max_length=128)
    size_bytes: int = Field(ge=0, le=2**53)


class ModelCallUsage(BaseModel):
    """Body of ``PUT /internal/usage/model-calls/{source_id}``: whose calls, what they cost."""

    tenant_id: str = Field(min_length=1, max_length=128)
    source: Literal["graph", "wiki", "embedding"]
    input_tokens: int = Field(ge=0, le=2**53)
    output_tokens: int = Field(ge=0, le=2**53)
    llm_calls: int = Field(ge=0, le=2**31 - 1)


class UsageReport(BaseModel):
    """Usage of one tenant in ``[from, to)``, one entry per user or agent."""

    tenant_id: str
    group_by: UsageGroup
    totals: list[UsageTotals]


def usage_router(sessions: async_sessionmaker[AsyncSession]) -> APIRouter:
    """The usage route."""
    router = APIRouter(tags=["internal"])

    @router.get(USAGE_ROUTE, response_model=UsageReport)
    async def usage(
        tenant_id: Annotated[str, Query(min_length=1, max_length=128)],
        start: Annotated[AwareDatetime, Query(alias="from")],
        end: Annotated[AwareDatetime, Query(alias="to")],
        group_by: UsageGroup = "user",
    ) -> UsageReport:
        """Sums of tokens in/out, model calls, tool calls and ingested bytes."""
        if end <= start or end - start > MAX_PERIOD:
            raise HTTPException(422, "`to` must be after `from`, at most 366 days later")
        totals = await usage_totals(sessions, tenant_id, start, end, group_by)
        return UsageReport(tenant_id=tenant_id, group_by=group_by, totals=totals)

    @router.put(DOCUMENT_USAGE_ROUTE, status_code=204)
    async def document_usage(
        document_id: Annotated[str, Path(min_length=1, max_length=64)], body: DocumentUsage
    ) -> Response:
        """Meter one ingested document. Idempotent on the document (the usage row's
        natural key): knowledge sends it at upload and again when a worker finishes the
        document, and a document is counted once whichever arrives."""
        async with sessions.begin() as s:
            await record_document(
                s, tenant_id=body.tenant_id, document_id=document_id, user_id=body.user_id,
                size_bytes=body.size_bytes,
            )  # fmt: skip
        return Response(status_code=204)

    @router.put(MODEL_USAGE_ROUTE, status_code=204)
    async def model_usage(
        source_id: Annotated[str, Path(min_length=1, max_length=128)], body: ModelCallUsage
    ) -> Response:
        """Meter model calls made at ingestion. Idempotent on (tenant, source, source_id):
        a repeat stores the same totals."""
        async with sessions.begin() as s:
            await record_model_calls(
                s, tenant_id=body.tenant_id, source=body.source, source_id=source_id,
                input_tokens=body.input_tokens, output_tokens=body.output_tokens,
                llm_calls=body.llm_calls,
            )  # fmt: skip
        return Response(status_code=204)

    return router
