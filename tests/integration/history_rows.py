"""Stored conversations for history and turn-audit tests, written straight
into memory's tables (the rows memory's recorder would have written)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import httpx
from fastapi import FastAPI
from sqlalchemy import delete, insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_memory.turns_api import turns_router
from weft_storage.memory.models import ChatSession, Message
from weft_testkit.credentials import trusted


async def seed_completed_turns(
    sessions: async_sessionmaker[AsyncSession], turns: int, *, answer: str | None = None
) -> tuple[str, str]:
    """A new tenant's session of user ``u`` with ``turns`` completed turns, questions
    ``q0``, ``q1``, ... and answers ``answer`` (default ``a0``, ``a1``, ...), one second
    apart; returns (tenant id, session id)."""
    tenant, sid = f"t-{secrets.token_hex(4)}", f"ses_{secrets.token_hex(6)}"
    base = datetime(2026, 1, 1, tzinfo=UTC)
    async with sessions.begin() as s:
        s.add(ChatSession(id=sid, tenant_id=tenant, user_id="u"))
    rows = []
    for i in range(turns):
        common = {"tenant_id": tenant, "session_id": sid, "request_id": f"{sid}-r{i}",
                  "is_completed": True, "status": "completed", "agent_steps": []}  # fmt: skip
        at = base + timedelta(seconds=i)
        rows.append({**common, "id": f"{sid[-8:]}u{i}", "role": "user", "content": f"q{i}",
                     "created_at": at})  # fmt: skip
        rows.append({**common, "id": f"{sid[-8:]}a{i}", "role": "assistant",
                     "content": f"a{i}" if answer is None else answer,
                     "created_at": at + timedelta(microseconds=1)})  # fmt: skip
    async with sessions.begin() as s:
        await s.execute(insert(Message), rows)
    return tenant, sid


async def seed_running_turns(
    sessions: async_sessionmaker[AsyncSession], statuses: list[str], start: datetime
) -> tuple[str, str, list[str]]:
    """A new tenant's session with one turn per status (user row completed, assistant row
    with that status), one second apart from ``start``; (tenant, session, request ids)."""
    tenant, sid = f"t-{secrets.token_hex(4)}", f"ses_{secrets.token_hex(6)}"
    async with sessions.begin() as s:
        s.add(ChatSession(id=sid, tenant_id=tenant, user_id="u"))
    rows, rids = [], []
    for i, status in enumerate(statuses):
        rid = f"{sid}-r{i}"
        rids.append(rid)
        at = start + timedelta(seconds=i)
        common = {"tenant_id": tenant, "session_id": sid, "request_id": rid, "agent_steps": []}
        rows.append({**common, "id": f"{sid[-8:]}u{i}", "role": "user", "content": "q",
                     "status": "completed", "is_completed": True, "created_at": at})  # fmt: skip
        rows.append({**common, "id": f"{sid[-8:]}a{i}", "role": "assistant", "content": "",
                     "status": status, "is_completed": status == "completed",
                     "created_at": at + timedelta(microseconds=1)})  # fmt: skip
    async with sessions.begin() as s:
        await s.execute(insert(Message), rows)
    return tenant, sid, rids


async def drop_sessions(sessions: async_sessionmaker[AsyncSession], session_ids: list[str]) -> None:
    """Delete seeded sessions with their messages: running rows left in a shared database
    would be audited by every engine that uses it (``TurnAuditor``)."""
    async with sessions.begin() as s:
        await s.execute(delete(ChatSession).where(ChatSession.id.in_(session_ids)))


@asynccontextmanager
async def turns_api(
    sessions: async_sessionmaker[AsyncSession], *, raise_app_exceptions: bool = True
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of memory's ``/internal/turns`` routes, in process, on the real database."""
    app = FastAPI()
    app.include_router(turns_router(sessions))
    transport = trusted(app, raise_app_exceptions=raise_app_exceptions)
    async with httpx.AsyncClient(transport=transport, base_url="http://memory") as client:
        yield client
