"""Tenants as the operator manages them: create, read, list, change settings and status.

A tenant's settings are validated here (:class:`TenantSettings`): its retention, its
identity provider and the maximum access level of its agents. An identity provider's
issuer is unique across tenants (a column with a unique index), so a token's ``iss``
always names one tenant.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from fastapi import HTTPException
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import AccessLevel
from weft_storage.gateway.models_admin import Tenant, TenantStatus

TENANT_ID_PATTERN = r"^[A-Za-z0-9_.-]{1,128}$"
"""No ``:`` and no glob characters: Redis keys embed the id between colons, and a
tenant's keys are found by pattern when it is deleted."""

Algorithm = Literal["RS256", "ES256", "EdDSA"]


def _every_algorithm() -> list[Algorithm]:
    return ["RS256", "ES256", "EdDSA"]


class Retention(BaseModel):
    """How long a tenant's data is kept (None: no limit beyond the platform's)."""

    model_config = ConfigDict(extra="forbid")
    messages_days: float | None = Field(default=None, gt=0, le=36_500)
    """Messages older than this are deleted by the maintenance job."""
    streams_days: float | None = Field(default=None, gt=0, le=36_500)
    """A session stream not written for this long is deleted (the platform's
    ``stream_retention_s`` still applies when it is shorter)."""


class IdentityProvider(BaseModel):
    """The tenant's own identity provider: its signed JWTs vouch for the tenant's users."""

    model_config = ConfigDict(extra="forbid")
    issuer: str = Field(min_length=1, max_length=500)
    audience: str = Field(min_length=1, max_length=500)
    jwks_url: str | None = Field(default=None, max_length=2000, pattern=r"^https?://")
    jwks: dict[str, Any] | None = None
    """An inline JWK set (``{"keys": [...]}``) instead of ``jwks_url``."""
    algorithms: list[Algorithm] = Field(default_factory=_every_algorithm, min_length=1)
    max_token_lifetime_s: int | None = Field(
        default=None,
        ge=60,
        le=366 * 86400,
        description="Longest end-user token this provider may issue: a token whose exp is "
        "further than this after its iat (or, without iat, after the moment it is "
        "presented) is refused with 401. None: the gateway's "
        "WEFT_END_USER_MAX_TOKEN_LIFETIME_S (24 h).",
    )

    @model_validator(mode="after")
    def _one_key_source(self) -> IdentityProvider:
        if (self.jwks_url is None) == (self.jwks is None):
            raise ValueError("give exactly one of jwks_url and jwks")
        if self.jwks is not None and not isinstance(self.jwks.get("keys"), list):
            raise ValueError("jwks must be a JWK set: {'keys': [...]}")
        return self


class TenantSettings(BaseModel):
    """Everything configurable per tenant."""

    model_config = ConfigDict(extra="forbid")
    retention: Retention = Field(default_factory=Retention)
    identity_provider: IdentityProvider | None = None
    max_access_level: AccessLevel | None = Field(
        default=None,
        description="SPEC H-01: caps the access level of every agent of the tenant "
        "(read_only < confirm < auto_write); None: no cap.",
    )


class TenantView(BaseModel):
    """A tenant as the admin API shows it."""

    id: str
    name: str
    status: TenantStatus
    settings: TenantSettings
    created_at: datetime
    updated_at: datetime


def _view(row: Tenant) -> TenantView:
    return TenantView(
        id=row.id,
        name=row.name,
        status=row.status,
        settings=TenantSettings.model_validate(row.settings),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _issuer(settings: TenantSettings) -> str | None:
    return settings.identity_provider.issuer if settings.identity_provider else None


class TenantRegistry:
    """The ``tenants`` table."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]):
        self._sessions = sessions

    async def create(self, tenant_id: str, name: str, settings: TenantSettings) -> TenantView:
        """A new active tenant; 409 when the id or the issuer is taken."""
        stmt = (
            insert(Tenant)
            .values(
                id=tenant_id,
                name=name,
                status="active",
                settings=settings.model_dump(mode="json"),
                issuer=_issuer(settings),
            )
            .on_conflict_do_nothing(index_elements=["id"])
            .returning(Tenant)
        )
        try:
            async with self._sessions.begin() as s:
                row = await s.scalar(stmt)
        except IntegrityError as exc:
            raise HTTPException(409, "issuer already belongs to another tenant") from exc
        if row is None:
            raise HTTPException(409, f"tenant {tenant_id!r} already exists")
        return _view(row)

    async def ensure(self, tenant_id: str, name: str = "") -> None:
        """A row for ``tenant_id`` if it has none (the development key's tenant)."""
        stmt = insert(Tenant).values(id=tenant_id, name=name or tenant_id)
        async with self._sessions.begin() as s:
            await s.execute(stmt.on_conflict_do_nothing(index_elements=["id"]))

    async def get(self, tenant_id: str) -> TenantView:
        """One tenant, or 404."""
        async with self._sessions() as s:
            row = await s.get(Tenant, tenant_id)
        if row is None:
            raise HTTPException(404, f"tenant {tenant_id!r} not found")
        return _view(row)

    async def page(
        self, status: TenantStatus | None, limit: int, offset: int
    ) -> tuple[list[TenantView], int]:
        """A page of tenants by id, and how many there are."""
        query = select(Tenant)
        counted = select(func.count()).select_from(Tenant)
        if status is not None:
            query = query.where(Tenant.status == status)
            counted = counted.where(Tenant.status == status)
        async with self._sessions() as s:
            rows = (await s.scalars(query.order_by(Tenant.id).limit(limit).offset(offset))).all()
            total = int(await s.scalar(counted) or 0)
        return [_view(r) for r in rows], total

    async def update(
        self, tenant_id: str, name: str | None, settings: TenantSettings | None
    ) -> TenantView:
        """Change the name and/or the settings (whole); 404, or 409 for a taken issuer."""
        values: dict[str, Any] = {"updated_at": func.now()}
        if name is not None:
            values["name"] = name
        if settings is not None:
            values["settings"] = settings.model_dump(mode="json")
            values["issuer"] = _issuer(settings)
        return await self._update(tenant_id, values, only_from=None)

    async def set_status(
        self, tenant_id: str, status: TenantStatus, *, only_from: tuple[str, ...]
    ) -> TenantView:
        """Move to ``status`` when the tenant is in one of ``only_from`` (or already there);
        404 unknown, 409 otherwise."""
        return await self._update(
            tenant_id, {"status": status, "updated_at": func.now()}, only_from=(*only_from, status)
        )

    async def _update(
        self, tenant_id: str, values: dict[str, Any], only_from: tuple[str, ...] | None
    ) -> TenantView:
        stmt = update(Tenant).where(Tenant.id == tenant_id).values(**values).returning(Tenant)
        if only_from is not None:
            stmt = stmt.where(Tenant.status.in_(only_from))
        try:
            async with self._sessions.begin() as s:
                row = await s.scalar(stmt)
        except IntegrityError as exc:
            raise HTTPException(409, "issuer already belongs to another tenant") from exc
        if row is None:
            current = await self.get(tenant_id)  # 404 when missing
            raise HTTPException(409, f"tenant {tenant_id!r} is {current.status}")
        return _view(row)

    async def remove(self, tenant_id: str) -> None:
        """Delete the row itself (the last step of a tenant's deletion)."""
        async with self._sessions.begin() as s:
            row = await s.get(Tenant, tenant_id)
            if row is not None:
                await s.delete(row)

    async def existing(self, tenant_ids: Sequence[str]) -> set[str]:
        """Those of ``tenant_ids`` that have a row (whatever its status)."""
        if not tenant_ids:
            return set()
        async with self._sessions() as s:
            rows = await s.scalars(select(Tenant.id).where(Tenant.id.in_(list(tenant_ids))))
            return set(rows)

    async def deleting(self) -> list[str]:
        """Tenants whose deletion has not finished."""
        async with self._sessions() as s:
            rows = await s.scalars(select(Tenant.id).where(Tenant.status == "deleting"))
            return list(rows)

    async def with_retention(self) -> list[tuple[str, Retention]]:
        """Tenants that limit the retention of their messages or streams."""
        async with self._sessions() as s:
            rows = (await s.execute(select(Tenant.id, Tenant.settings))).all()
        found = []
        for tenant_id, raw in rows:
            retention = TenantSettings.model_validate(raw).retention
            if retention.messages_days is not None or retention.streams_days is not None:
                found.append((tenant_id, retention))
        return found

    async def by_issuer(self, issuer: str) -> tuple[str, str, IdentityProvider] | None:
        """(tenant id, status, identity provider) of the tenant that trusts ``issuer``."""
        async with self._sessions() as s:
            row = await s.scalar(select(Tenant).where(Tenant.issuer == issuer))
        if row is None:
            return None
        provider = TenantSettings.model_validate(row.settings).identity_provider
        if provider is None:
            return None
        return row.id, row.status, provider
