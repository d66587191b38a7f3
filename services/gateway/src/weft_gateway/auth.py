"""API keys -> tenant and user (stored as SHA-256 only)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from fastapi import HTTPException, Request
from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_storage.models import ApiKey


@dataclass(frozen=True, kw_only=True)
class Principal:
    """Who is calling."""

    tenant_id: str
    user_id: str
    knowledge_base_ids: list[str] | None = None
    """None: every KB of the tenant; else only these (SPEC A-09)."""


def hash_key(key: str) -> str:
    """SHA-256 hex of an API key."""
    return hashlib.sha256(key.encode()).hexdigest()


class ApiKeyAuth:
    """Looks a request's key up; ``Authorization: Bearer <key>`` or ``X-API-Key``."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self._sessions = sessions

    async def __call__(self, request: Request) -> Principal:
        key = _presented_key(request)
        if not key:
            raise HTTPException(401, "missing API key (Authorization: Bearer <key> or X-API-Key)")
        async with self._sessions() as s:
            row = await s.scalar(
                select(ApiKey).where(ApiKey.key_hash == hash_key(key), ApiKey.revoked_at.is_(None))
            )
        if row is None:
            raise HTTPException(401, "invalid or revoked API key")
        return Principal(
            tenant_id=row.tenant_id, user_id=row.user_id, knowledge_base_ids=row.knowledge_base_ids
        )

    async def register(self, tenant_id: str, user_id: str, key: str, name: str = "") -> None:
        """Store ``key`` for the tenant/user (idempotent)."""
        stmt = insert(ApiKey).values(
            id=secrets.token_hex(8),
            tenant_id=tenant_id,
            user_id=user_id,
            key_hash=hash_key(key),
            name=name,
        )
        async with self._sessions.begin() as s:
            await s.execute(stmt.on_conflict_do_nothing(index_elements=["key_hash"]))


def _presented_key(request: Request) -> str:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.headers.get("x-api-key", "").strip()
