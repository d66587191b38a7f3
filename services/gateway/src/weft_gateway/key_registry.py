"""API keys as the operator manages them: create (the secret is shown once), list (never
the secret), revoke, rotate; and the development key's start-up rule.

A key is stored as its SHA-256 only. It stops working when revoked or past its
``expires_at``; the gateway caches lookups for ``auth_cache_s``, so either takes effect
within that time. Rotation makes a new key with the same tenant, user, name and scope and
lets the old one expire after ``overlap_s`` (0: at once), so clients can switch over.
A key may hold scopes (:data:`KeyScope`); a rotated key keeps them.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta
from typing import Literal

from fastapi import HTTPException
from pydantic import BaseModel
from sqlalchemy import func, or_, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_storage.gateway.keys import ApiKey

from weft_gateway.auth import hash_key

DEV_KEY_NAME = "dev bootstrap key"

KeyScope = Literal["approvals:decide"]
"""Extra rights a key may hold. ``approvals:decide``: decide any prompt of the key's tenant
(an approver service), not only its own user's (docs/approvals.md)."""


class KeyView(BaseModel):
    """A key as listed: never its secret."""

    id: str
    tenant_id: str
    user_id: str
    name: str
    knowledge_base_ids: list[str] | None
    scopes: list[str]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    active: bool


class NewKey(KeyView):
    """A key just made: ``secret`` is shown this once and never stored."""

    secret: str


def _view(row: ApiKey, now: datetime) -> KeyView:
    active = row.revoked_at is None and (row.expires_at is None or row.expires_at > now)
    return KeyView(
        id=row.id,
        tenant_id=row.tenant_id,
        user_id=row.user_id,
        name=row.name,
        knowledge_base_ids=row.knowledge_base_ids,
        scopes=sorted(row.scopes or ()),
        created_at=row.created_at,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        active=active,
    )


def new_secret() -> str:
    """A fresh key: ``wk_`` and 256 random bits (never contains a ``.``, unlike a JWT)."""
    return f"wk_{secrets.token_urlsafe(32)}"


class KeyRegistry:
    """The ``api_keys`` table."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self._sessions = sessions

    async def create(
        self,
        tenant_id: str,
        user_id: str,
        name: str,
        knowledge_base_ids: list[str] | None,
        expires_at: datetime | None,
        scopes: list[str] | None = None,
    ) -> NewKey:
        """A new key of ``tenant_id`` for ``user_id`` with ``scopes`` (none: a plain key)."""
        secret = new_secret()
        row = ApiKey(
            id=secrets.token_hex(8),
            tenant_id=tenant_id,
            user_id=user_id,
            key_hash=hash_key(secret),
            name=name,
            knowledge_base_ids=knowledge_base_ids,
            expires_at=expires_at,
            scopes=sorted(set(scopes)) if scopes else None,
        )
        async with self._sessions.begin() as s:
            s.add(row)
        async with self._sessions() as s:
            stored = await s.get(ApiKey, row.id)
        assert stored is not None
        return NewKey(**_view(stored, datetime.now(UTC)).model_dump(), secret=secret)

    async def page(
        self, tenant_id: str, include_inactive: bool, limit: int, offset: int
    ) -> list[KeyView]:
        """The tenant's keys, newest first."""
        query = select(ApiKey).where(ApiKey.tenant_id == tenant_id)
        if not include_inactive:
            query = query.where(
                ApiKey.revoked_at.is_(None),
                or_(ApiKey.expires_at.is_(None), ApiKey.expires_at > func.now()),
            )
        query = query.order_by(ApiKey.created_at.desc(), ApiKey.id).limit(limit).offset(offset)
        now = datetime.now(UTC)
        async with self._sessions() as s:
            return [_view(r, now) for r in await s.scalars(query)]

    async def revoke(self, tenant_id: str, key_id: str) -> KeyView:
        """Revoke a key (idempotent: a revoked key stays as it was); 404 unknown."""
        stmt = (
            update(ApiKey)
            .where(ApiKey.tenant_id == tenant_id, ApiKey.id == key_id, ApiKey.revoked_at.is_(None))
            .values(revoked_at=func.now())
        )
        async with self._sessions.begin() as s:
            await s.execute(stmt)
        return await self._get(tenant_id, key_id)

    async def rotate(self, tenant_id: str, key_id: str, overlap_s: int) -> NewKey:
        """A new key like ``key_id``; the old one expires after ``overlap_s``. 404 unknown,
        409 when the old key no longer works (rotation would revive nothing)."""
        old = await self._get(tenant_id, key_id)
        if not old.active:
            raise HTTPException(409, f"key {key_id!r} is revoked or expired; create a new one")
        ends = datetime.now(UTC) + timedelta(seconds=overlap_s)
        if old.expires_at is not None and old.expires_at < ends:
            ends = old.expires_at
        new = await self.create(
            tenant_id, old.user_id, old.name, old.knowledge_base_ids, old.expires_at, old.scopes
        )
        values = {"revoked_at": func.now()} if overlap_s == 0 else {"expires_at": ends}
        async with self._sessions.begin() as s:
            await s.execute(update(ApiKey).where(ApiKey.id == key_id).values(**values))
        return new

    async def _get(self, tenant_id: str, key_id: str) -> KeyView:
        async with self._sessions() as s:
            row = await s.get(ApiKey, key_id)
        if row is None or row.tenant_id != tenant_id:
            raise HTTPException(404, f"key {key_id!r} not found")
        return _view(row, datetime.now(UTC))

    async def apply_dev_key(self, tenant_id: str, user_id: str, secret: str) -> int:
        """The development key's rule at start: ``secret`` set -> that key works (again,
        if it had been revoked); unset -> every development key is revoked, so a
        deployment that drops the variable keeps no bootstrap key. Other development keys
        are left alone while one is set: gateways of several stacks may share a database.
        How many keys it revoked."""
        async with self._sessions.begin() as s:
            if not secret:
                revoked = await s.execute(
                    update(ApiKey)
                    .where(ApiKey.name == DEV_KEY_NAME, ApiKey.revoked_at.is_(None))
                    .values(revoked_at=func.now())
                )
                return int(getattr(revoked, "rowcount", 0) or 0)
            stmt = insert(ApiKey).values(
                id=secrets.token_hex(8),
                tenant_id=tenant_id,
                user_id=user_id,
                key_hash=hash_key(secret),
                name=DEV_KEY_NAME,
            )
            await s.execute(
                stmt.on_conflict_do_update(
                    index_elements=["key_hash"], set_={"revoked_at": None, "expires_at": None}
                )
            )
        return 0
