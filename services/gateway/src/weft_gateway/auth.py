"""API keys -> tenant and user (stored as SHA-256 only); end-user JWTs through
``end_users``; a suspended (or deleting) tenant's callers get 403."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog
from fastapi import HTTPException, Request
from sqlalchemy import func, or_, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_platform.credentials import API_AUDIENCE, CredentialSigner
from weft_platform.internal_auth import outbound_credential
from weft_storage.gateway.keys import ApiKey
from weft_storage.gateway.models_admin import Tenant

from weft_gateway.limits import TenantLimits

if TYPE_CHECKING:
    from weft_gateway.end_users import EndUserAuth


@dataclass(frozen=True, kw_only=True)
class Principal:
    """Who is calling."""

    tenant_id: str
    user_id: str
    knowledge_base_ids: list[str] | None = None
    """None: every KB of the tenant; else only these (SPEC A-09)."""
    scopes: frozenset[str] = frozenset()
    """Extra rights of the key (``approvals:decide``); an end user's token has none."""


def hash_key(key: str) -> str:
    """SHA-256 hex of an API key."""
    return hashlib.sha256(key.encode()).hexdigest()


class ApiKeyAuth:
    """Looks a request's key up; ``Authorization: Bearer <key>`` or ``X-API-Key``."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        limits: TenantLimits | None = None,
        *,
        cache_s: float = 30.0,
        signer: CredentialSigner | None = None,
        credential_ttl_s: float = 120.0,
        end_users: EndUserAuth | None = None,
    ):
        """``signer``: each accepted request gets a request credential (tenant and user)
        that the gateway's internal calls made while serving it carry. ``end_users``:
        bearer tokens shaped like a JWT are checked against the tenants' identity
        providers instead of the key table."""
        self._sessions = sessions
        self._end_users = end_users
        self._limits = limits
        self._cache_s = cache_s
        self._signer = signer
        self._credential_ttl_s = credential_ttl_s
        # A burst of thousands of SSE connects must not queue on the database pool: keys
        # are cached briefly (a revocation, an expiry or a tenant's suspension takes effect
        # within ``cache_s``) and concurrent lookups of one key share one query.
        self._cache: dict[str, tuple[float, _KeyFacts | None]] = {}
        self._inflight: dict[str, asyncio.Task[_KeyFacts | None]] = {}

    async def __call__(self, request: Request) -> Principal:
        key = _presented_key(request)
        if not key:
            raise HTTPException(401, "missing API key (Authorization: Bearer <key> or X-API-Key)")
        if self._end_users is not None and _bearer(request) and _is_jwt(key):
            principal, status = await self._end_users.authenticate(key)
        else:
            facts = await self._lookup(hash_key(key))
            if facts is None:
                raise HTTPException(401, "invalid, expired or revoked API key")
            principal, status = facts.principal, facts.tenant_status
        # Log lines of the rest of the request name the tenant (the access line too).
        structlog.contextvars.bind_contextvars(tenant_id=principal.tenant_id)
        if status == "suspended":
            raise HTTPException(403, "tenant suspended")
        if status == "deleting":
            raise HTTPException(403, "tenant is being deleted")
        if self._limits is not None:
            await self._limits.check_rate(principal.tenant_id)
        if self._signer is not None:
            # A context variable rather than a parameter of every client method: each
            # request runs in its own context, so a call can only carry its own caller's.
            outbound_credential.set(
                self._signer.request(
                    tenant_id=principal.tenant_id,
                    user_id=principal.user_id,
                    knowledge_base_ids=principal.knowledge_base_ids,
                    audience=API_AUDIENCE,
                    ttl_s=self._credential_ttl_s,
                    scopes=principal.scopes,
                )
            )
        return principal

    async def _lookup(self, digest: str) -> _KeyFacts | None:
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        task = self._inflight.get(digest)
        if task is None:
            task = asyncio.create_task(self._load(digest))
            self._inflight[digest] = task
            task.add_done_callback(lambda _: self._inflight.pop(digest, None))
        facts = await asyncio.shield(task)
        if len(self._cache) >= 10_000:
            self._cache.clear()  # bounded; entries are cheap to reload
        self._cache[digest] = (now + self._cache_s, facts)
        return facts

    async def _load(self, digest: str) -> _KeyFacts | None:
        # A key of a tenant without a row (written by hand, or by an older tool) counts
        # as active: only a row can suspend a tenant.
        query = (
            select(ApiKey, Tenant.status)
            .outerjoin(Tenant, Tenant.id == ApiKey.tenant_id)
            .where(
                ApiKey.key_hash == digest,
                ApiKey.revoked_at.is_(None),
                or_(ApiKey.expires_at.is_(None), ApiKey.expires_at > func.now()),
            )
        )
        try:
            async with self._sessions() as s:
                found = (await s.execute(query)).first()
        except (SQLAlchemyError, OSError) as exc:
            raise HTTPException(503, "authentication store busy", {"Retry-After": "1"}) from exc
        if found is None:
            return None
        row, status = found
        principal = Principal(
            tenant_id=row.tenant_id,
            user_id=row.user_id,
            knowledge_base_ids=row.knowledge_base_ids,
            scopes=frozenset(row.scopes or ()),
        )
        return _KeyFacts(principal, status or "active")

    async def register(
        self,
        tenant_id: str,
        user_id: str,
        key: str,
        name: str = "",
        knowledge_base_ids: list[str] | None = None,
    ) -> None:
        """Store ``key`` for the tenant/user (idempotent); ``knowledge_base_ids`` limits it
        to those knowledge bases (SPEC A-09)."""
        stmt = insert(ApiKey).values(
            id=secrets.token_hex(8),
            tenant_id=tenant_id,
            user_id=user_id,
            key_hash=hash_key(key),
            name=name,
            knowledge_base_ids=knowledge_base_ids,
        )
        async with self._sessions.begin() as s:
            await s.execute(stmt.on_conflict_do_nothing(index_elements=["key_hash"]))


@dataclass(frozen=True)
class _KeyFacts:
    principal: Principal
    tenant_status: str


def _bearer(request: Request) -> bool:
    return request.headers.get("authorization", "").lower().startswith("bearer ")


def _is_jwt(token: str) -> bool:
    """Three dot-separated parts; API keys never hold a dot."""
    return token.count(".") == 2


def _presented_key(request: Request) -> str:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.headers.get("x-api-key", "").strip()
