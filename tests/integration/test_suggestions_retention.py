"""Retention of the turns the suggestions service keeps (``WEFT_TURN_RETENTION_DAYS``):
turns past it are deleted, newer ones stay; on the real PostgreSQL."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_storage.suggestions.models import SuggestionTurn
from weft_suggestions.retention import TurnRetention


def _turn(tenant: str, request: str, age_days: float) -> SuggestionTurn:
    return SuggestionTurn(
        tenant_id=tenant, request_id=request, session_id="s", user_id="u", agent_id="a",
        user_message_id="m" + request, query="q", references=[],
        created_at=datetime.now(UTC) - timedelta(days=age_days),
    )  # fmt: skip


async def test_turns_past_retention_are_deleted_and_newer_ones_kept(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    tenant = "t-ret-" + secrets.token_hex(3)
    async with sessions.begin() as s:
        s.add_all([_turn(tenant, f"old{i}", 31 + i) for i in range(5)])
        s.add_all([_turn(tenant, "recent", 29), _turn(tenant, "today", 0)])
    retention = TurnRetention(sessions, days=30, interval_s=3600, batch=2)
    assert await retention.purge() >= 5
    async with sessions() as s:
        left = await s.scalars(
            select(SuggestionTurn.request_id).where(SuggestionTurn.tenant_id == tenant)
        )
        assert sorted(left) == ["recent", "today"]
