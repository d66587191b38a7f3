"""The re-encrypt step of a key rollover: every MCP secret column rewritten with the first
key of ``WEFT_MCP_SECRET_KEYS`` (``MultiFernet.rotate``), batch by batch."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import InstrumentedAttribute
from weft_storage.agent_config.models_mcp import (
    McpOAuthClient,
    McpOAuthState,
    McpServer,
    McpUserToken,
)

from weft_agent_config.mcp.secret_box import SecretBox, UnreadableSecret

BATCH = 200

COLUMNS: tuple[InstrumentedAttribute[Any], ...] = (
    McpServer.headers_encrypted,
    McpOAuthClient.client_secret_encrypted,
    McpOAuthState.verifier_encrypted,
    McpUserToken.tokens_encrypted,
)
"""Every encrypted column (a new one is added here)."""


UNREADABLE = "unreadable"
"""Key of the report: tokens no configured key opens (left as they are). Not 0: do not
drop a key yet, the secrets under it would be lost."""


async def reencrypt_all(
    sessions: async_sessionmaker[AsyncSession], box: SecretBox
) -> dict[str, int]:
    """Rotate every stored token; how many per ``table.column``, and how many no key
    opens (``unreadable``: left untouched, reported rather than stopping halfway).
    Idempotent: run it again after an interruption."""
    counts: dict[str, int] = {UNREADABLE: 0}
    for column in COLUMNS:
        model = column.class_
        key = f"{model.__tablename__}.{column.key}"
        counts[key], unreadable = await _rotate_column(sessions, box, model, column)
        counts[UNREADABLE] += unreadable
    return counts


async def _rotate_column(
    sessions: async_sessionmaker[AsyncSession],
    box: SecretBox,
    model: Any,
    column: InstrumentedAttribute[Any],
) -> tuple[int, int]:
    done, unreadable, offset = 0, 0, 0
    while True:
        async with sessions.begin() as s:
            stmt: Any = (
                select(model)
                .where(column.isnot(None))
                .order_by(*model.__table__.primary_key.columns)
                .offset(offset)
                .limit(BATCH)
                .with_for_update()
            )
            rows = list(await s.scalars(stmt))
            for row in rows:
                try:
                    setattr(row, column.key, box.rotate(getattr(row, column.key)))
                    done += 1
                except UnreadableSecret:
                    unreadable += 1
        offset += len(rows)
        if len(rows) < BATCH:
            return done, unreadable
