"""Metering (the ``usage`` table) and budget overrides (``tenant_budgets``).

Writes are idempotent on the row's natural key: a turn's row is written with the turn's
final totals (never increments), so the same ``complete`` delivered twice stores the
same row once; a document's row is written in the transaction that stores the document.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel
from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts.usage import UsageGroup, UsageTotals

from weft_storage.memory.models_usage import UsageRecord

TURN = "turn"
DOCUMENT = "document"


class TurnTotals(BaseModel):
    """The totals of one turn, as its ``complete`` reported them."""

    input_tokens: int = 0
    output_tokens: int = 0
    llm_calls: int = 0
    tool_calls: int = 0


async def open_turn(
    s: AsyncSession,
    *,
    tenant_id: str,
    request_id: str,
    user_id: str,
    agent_id: str,
    at: datetime,
) -> None:
    """The turn's row, with its user and agent and no usage yet (from ``turn_started``;
    a second delivery changes nothing)."""
    stmt = insert(UsageRecord).values(
        tenant_id=tenant_id, source=TURN, source_id=request_id, user_id=user_id,
        agent_id=agent_id, recorded_at=at,
    )  # fmt: skip
    await s.execute(stmt.on_conflict_do_nothing())


async def record_turn(
    s: AsyncSession, *, tenant_id: str, request_id: str, totals: TurnTotals, at: datetime
) -> None:
    """Store a turn's final totals (from ``complete``): they replace, never add, so a
    redelivered ``complete`` stores the same values. A turn whose ``turn_started`` was
    not recorded keeps an empty user and agent."""
    values = totals.model_dump()
    stmt = insert(UsageRecord).values(
        tenant_id=tenant_id, source=TURN, source_id=request_id, recorded_at=at, **values
    )
    await s.execute(
        stmt.on_conflict_do_update(index_elements=["tenant_id", "source", "source_id"], set_=values)
    )


async def record_document(
    s: AsyncSession, *, tenant_id: str, document_id: str, user_id: str, size_bytes: int
) -> None:
    """Meter an ingested document (in the caller's transaction, with the document)."""
    stmt = insert(UsageRecord).values(
        tenant_id=tenant_id, source=DOCUMENT, source_id=document_id, user_id=user_id,
        ingestion_bytes=size_bytes,
    )  # fmt: skip
    await s.execute(stmt.on_conflict_do_nothing())


async def record_generation(
    s: AsyncSession,
    *,
    tenant_id: str,
    kind: str,
    generation_id: str,
    input_tokens: int,
    output_tokens: int,
    llm_calls: int,
) -> None:
    """Meter the model calls of one knowledge generation (a document's wiki pages): the
    row's source is ``kind``; its totals replace the row's, as a turn's do."""
    values = {"input_tokens": input_tokens, "output_tokens": output_tokens, "llm_calls": llm_calls}
    stmt = insert(UsageRecord).values(
        tenant_id=tenant_id, source=kind, source_id=generation_id, **values
    )
    await s.execute(
        stmt.on_conflict_do_update(index_elements=["tenant_id", "source", "source_id"], set_=values)
    )


async def usage_totals(
    sessions: async_sessionmaker[AsyncSession],
    tenant_id: str,
    start: datetime,
    end: datetime,
    group_by: UsageGroup,
) -> list[UsageTotals]:
    """A tenant's usage in ``[start, end)`` per user or per agent, largest token use first.

    The function the operator's admin API calls (memory serves it as
    ``GET /internal/usage``)."""
    key = UsageRecord.user_id if group_by == "user" else UsageRecord.agent_id
    u = UsageRecord
    query = (
        select(
            key,
            func.sum(u.input_tokens),
            func.sum(u.output_tokens),
            func.sum(u.llm_calls),
            func.sum(u.tool_calls),
            func.sum(u.ingestion_bytes),
            func.count().filter(u.source == TURN),
            func.count().filter(u.source == DOCUMENT),
        )
        .where(u.tenant_id == tenant_id, u.recorded_at >= start, u.recorded_at < end)
        .group_by(key)
        .order_by((func.sum(u.input_tokens) + func.sum(u.output_tokens)).desc(), key)
    )
    async with sessions() as s:
        rows = (await s.execute(query)).all()
    return [
        UsageTotals(
            key=k,
            input_tokens=i,
            output_tokens=o,
            llm_calls=c,
            tool_calls=t,
            ingestion_bytes=b,
            turns=n,
            documents=d,
        )
        for k, i, o, c, t, b, n, d in rows
    ]
