"""The admin API (``/admin/v1``): tenants, their API keys and users, the audit log.

Only an operator (``require_operator``) reaches it; every change is written to the
append-only audit log with its outcome, refused and failed attempts included.
"""

# No ``from __future__ import annotations``: FastAPI must see the route annotations.

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query
from pydantic import BaseModel, Field, model_validator
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts.usage import UsageGroup, UsageTotals
from weft_storage.gateway.budgets import budget_override, set_budget_override
from weft_storage.gateway.models_admin import TenantStatus
from weft_storage.tenant_data import Scope

from weft_gateway.admin_auth import Operator, require_operator
from weft_gateway.admin_port import ADMIN_PREFIX, RequireAdminPort
from weft_gateway.audit_log import AuditFilter, AuditLog, AuditView, Outcome
from weft_gateway.key_registry import KeyRegistry, KeyScope, KeyView, NewKey
from weft_gateway.tenant_lifecycle import TenantLifecycle
from weft_gateway.tenant_purge import DataPurger, PurgeReport, Residue
from weft_gateway.tenant_registry import (
    TENANT_ID_PATTERN,
    TenantRegistry,
    TenantSettings,
    TenantView,
)
from weft_gateway.usage_client import UsageReader

AnyTenantId = Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")]
"""Existing tenants may hold ``:`` (ids from before the tenants table)."""
ObjectId = Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:@-]+$")]
Who = Annotated[Operator, Depends(require_operator)]
MAX_KEY_LIFETIME_S = 10 * 365 * 86400
MAX_ROTATION_OVERLAP_S = 7 * 86400
MAX_USAGE_SPAN = timedelta(days=366)


class TenantCreate(BaseModel):
    """Body of ``POST /admin/v1/tenants``."""

    id: str = Field(pattern=TENANT_ID_PATTERN)
    name: str = Field(default="", max_length=200)
    settings: TenantSettings = Field(default_factory=TenantSettings)


class TenantUpdate(BaseModel):
    """Body of ``PATCH /admin/v1/tenants/{id}``: the settings are replaced as a whole."""

    name: str | None = Field(default=None, max_length=200)
    settings: TenantSettings | None = None


class TenantPage(BaseModel):
    """A page of tenants."""

    items: list[TenantView]
    total: int


class KeyCreate(BaseModel):
    """Body of ``POST /admin/v1/tenants/{id}/keys``."""

    user_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:@-]+$")
    name: str = Field(default="", max_length=200)
    knowledge_base_ids: list[str] | None = Field(default=None, max_length=100)
    """Limit the key to these knowledge bases (SPEC A-09); None: all of the tenant's."""
    expires_in_s: int | None = Field(default=None, ge=1, le=MAX_KEY_LIFETIME_S)
    scopes: list[KeyScope] = Field(
        default_factory=list,
        max_length=4,
        description="Extra rights; only approvals:decide (decide any prompt of the "
        "tenant, docs/approvals.md) exists.",
    )


class KeyRotate(BaseModel):
    """Body of ``POST .../keys/{key_id}/rotate``."""

    overlap_s: int = Field(default=0, ge=0, le=MAX_ROTATION_OVERLAP_S)
    """How long the old key keeps working beside the new one (0: revoked at once)."""


class DeletionStarted(BaseModel):
    """Answer of ``DELETE /admin/v1/tenants/{id}``."""

    tenant_id: str
    status: str
    residue_url: str


class UserPurge(BaseModel):
    """Answer of ``DELETE /admin/v1/tenants/{id}/users/{user_id}``."""

    tenant_id: str
    user_id: str
    report: PurgeReport
    clean: bool


class TenantBudgets(BaseModel):
    """A tenant's own token budgets (``PUT``/``GET .../budget``): None keeps the gateway's
    default (``WEFT_TOKEN_BUDGET_PER_MINUTE`` / ``_PER_DAY``), 0 is unlimited."""

    tokens_per_minute: int | None = Field(default=None, ge=0, le=10**12)
    tokens_per_day: int | None = Field(default=None, ge=0, le=10**14)


class UsageQuery(BaseModel):
    """Query of ``GET .../usage``: ``[from, to)`` (default: the last 24 hours), at most
    366 days, per user or per agent."""

    start: datetime | None = Field(default=None, alias="from")
    end: datetime | None = Field(default=None, alias="to")
    group_by: UsageGroup = "user"

    @model_validator(mode="after")
    def _period(self) -> "UsageQuery":
        end = self.end or datetime.now(UTC)
        start = self.start or end - timedelta(days=1)
        if start.tzinfo is None or end.tzinfo is None:
            raise ValueError("from and to need a time zone (e.g. 2026-12-01T00:00:00Z)")
        if not start < end or end - start > MAX_USAGE_SPAN:
            raise ValueError("from must be before to, at most 366 days apart")
        self.start, self.end = start, end
        return self


class TenantUsage(BaseModel):
    """Answer of ``GET .../usage``."""

    tenant_id: str
    start: datetime = Field(serialization_alias="from")
    end: datetime = Field(serialization_alias="to")
    group_by: UsageGroup
    items: list[UsageTotals]


@dataclass(frozen=True)
class AdminServices:
    """What the admin routes work with."""

    tenants: TenantRegistry
    keys: KeyRegistry
    audit: AuditLog
    purger: DataPurger
    lifecycle: TenantLifecycle
    sessions: async_sessionmaker[AsyncSession]
    usage: UsageReader
    """Usage reports, from memory (which owns the ``usage`` table)."""


def admin_router(svc: AdminServices, *, port_check: RequireAdminPort | None = None) -> APIRouter:
    """Every ``/admin/v1`` route of this module; ``port_check``: they answer only on the
    admin port (``WEFT_ADMIN_PORT``)."""
    guard = [Depends(port_check)] if port_check is not None else []
    router = APIRouter(prefix=ADMIN_PREFIX, tags=["admin"], dependencies=guard)
    _tenant_routes(router, svc)
    _lifecycle_routes(router, svc)
    _key_routes(router, svc)
    _audit_routes(router, svc)
    _usage_routes(router, svc)
    return router


@asynccontextmanager
async def _audited(
    audit: AuditLog, who: Operator, action: str, target_type: str, target_id: str,
    detail: dict[str, Any] | None = None,
) -> AsyncIterator[dict[str, Any]]:  # fmt: skip
    """Record the action with its outcome; the body may add to the yielded detail."""
    extra: dict[str, Any] = dict(detail or {})
    outcome: Outcome = "ok"
    error: str | None = None
    try:
        yield extra
    except HTTPException as exc:
        outcome = "refused" if exc.status_code < 500 else "failed"
        error = str(exc.detail)[:2000]
        raise
    except Exception as exc:
        outcome, error = "failed", repr(exc)[:2000]
        raise
    finally:
        await audit.append(
            actor=who.id, action=action, target_type=target_type, target_id=target_id,
            outcome=outcome, detail=extra, error=error,
        )  # fmt: skip


def _tenant_routes(router: APIRouter, svc: AdminServices) -> None:
    @router.post("/tenants", status_code=201)
    async def create_tenant(who: Who, body: TenantCreate) -> TenantView:
        detail = {"max_access_level": body.settings.max_access_level}
        async with _audited(svc.audit, who, "tenant.create", "tenant", body.id, detail):
            free_at = await svc.lifecycle.id_free_at(body.id)
            if free_at is not None:
                raise HTTPException(
                    409,
                    f"tenant {body.id!r} was deleted recently; its id can be created again "
                    f"after {free_at.isoformat(timespec='seconds')} (WEFT_PURGE_WATCH_S), when "
                    "no late record of the deleted tenant can reach the new one",
                )
            return await svc.tenants.create(body.id, body.name, body.settings)

    @router.get("/tenants")
    async def list_tenants(
        who: Who,
        status: TenantStatus | None = None,
        limit: int = Query(default=50, ge=1, le=500),
        offset: int = Query(default=0, ge=0, le=1_000_000),
    ) -> TenantPage:
        items, total = await svc.tenants.page(status, limit, offset)
        return TenantPage(items=items, total=total)

    @router.get("/tenants/{tenant_id}")
    async def get_tenant(who: Who, tenant_id: AnyTenantId) -> TenantView:
        return await svc.tenants.get(tenant_id)

    @router.patch("/tenants/{tenant_id}")
    async def update_tenant(who: Who, tenant_id: AnyTenantId, body: TenantUpdate) -> TenantView:
        changed = sorted(body.model_dump(exclude_unset=True))
        detail: dict[str, Any] = {"fields": changed}
        if body.settings is not None:  # the cap is a right: its value goes into the log
            detail["max_access_level"] = body.settings.max_access_level
        async with _audited(svc.audit, who, "tenant.update", "tenant", tenant_id, detail):
            return await svc.tenants.update(tenant_id, body.name, body.settings)

    @router.post("/tenants/{tenant_id}/suspend")
    async def suspend_tenant(who: Who, tenant_id: AnyTenantId) -> TenantView:
        async with _audited(svc.audit, who, "tenant.suspend", "tenant", tenant_id):
            return await svc.tenants.set_status(tenant_id, "suspended", only_from=("active",))

    @router.post("/tenants/{tenant_id}/resume")
    async def resume_tenant(who: Who, tenant_id: AnyTenantId) -> TenantView:
        async with _audited(svc.audit, who, "tenant.resume", "tenant", tenant_id):
            return await svc.tenants.set_status(tenant_id, "active", only_from=("suspended",))


def _lifecycle_routes(router: APIRouter, svc: AdminServices) -> None:
    @router.delete("/tenants/{tenant_id}", status_code=202)
    async def delete_tenant(who: Who, tenant_id: AnyTenantId) -> DeletionStarted:
        """Start (or start again) the deletion of every piece of the tenant's data; poll
        ``residue_url`` until it is clean. A tenant with no row whose data is still there
        (ids from before the tenants table, or a write that raced a deletion) is purged
        too: the call is idempotent."""
        async with _audited(svc.audit, who, "tenant.delete", "tenant", tenant_id):
            try:
                await svc.tenants.set_status(
                    tenant_id, "deleting", only_from=("active", "suspended")
                )
            except HTTPException as exc:
                if exc.status_code != 404:
                    raise
            svc.lifecycle.purge_in_background(tenant_id, who.id)
        return DeletionStarted(
            tenant_id=tenant_id,
            status="deleting",
            residue_url=f"/admin/v1/tenants/{tenant_id}/residue",
        )

    @router.get("/tenants/{tenant_id}/residue")
    async def tenant_residue(who: Who, tenant_id: AnyTenantId) -> Residue:
        """Rows per table and Redis keys per pattern the tenant still has (all 0: gone),
        and each owner's answer (an owner that could not be asked: not clean)."""
        return await svc.purger.residue(Scope(tenant_id))

    @router.delete("/tenants/{tenant_id}/users/{user_id}")
    async def delete_user(who: Who, tenant_id: AnyTenantId, user_id: ObjectId) -> UserPurge:
        """Delete one user's sessions, messages, memories, suggestions and keys, now; the
        report lists what is left (all 0) and each owner's part. The tenant's shared data
        (agents, knowledge bases) stays. An owner that could not be reached is named in
        the report (``owners.<name>.error``, ``clean`` false): call again."""
        async with _audited(svc.audit, who, "user.delete", "user", f"{tenant_id}/{user_id}") as d:
            report = await svc.purger.purge(Scope(tenant_id, user_id))
            d.update(deleted_rows=report.deleted_rows, deleted_keys=report.deleted_keys)
            unreached = sorted(n for n, o in report.owners.items() if o.error)
            if unreached:
                d.update(clean=False, unreached_owners=unreached)
        return UserPurge(tenant_id=tenant_id, user_id=user_id, report=report, clean=report.clean)

    @router.get("/tenants/{tenant_id}/users/{user_id}/residue")
    async def user_residue(who: Who, tenant_id: AnyTenantId, user_id: ObjectId) -> Residue:
        """Rows the user still has; Redis keys of the user's remaining sessions."""
        return await svc.purger.residue(Scope(tenant_id, user_id))


def _key_routes(router: APIRouter, svc: AdminServices) -> None:
    @router.post("/tenants/{tenant_id}/keys", status_code=201)
    async def create_key(who: Who, tenant_id: AnyTenantId, body: KeyCreate) -> NewKey:
        """A new API key; ``secret`` is in this answer only."""
        detail = {
            "user_id": body.user_id,
            "kb_scoped": body.knowledge_base_ids is not None,
            "scopes": sorted(set(body.scopes)),
        }
        async with _audited(svc.audit, who, "key.create", "tenant", tenant_id, detail) as d:
            tenant = await svc.tenants.get(tenant_id)
            if tenant.status != "active":
                raise HTTPException(409, f"tenant {tenant_id!r} is {tenant.status}")
            expires = None
            if body.expires_in_s is not None:
                expires = datetime.now(UTC) + timedelta(seconds=body.expires_in_s)
            key = await svc.keys.create(
                tenant_id, body.user_id, body.name, body.knowledge_base_ids, expires,
                list(body.scopes),
            )  # fmt: skip
            d["key_id"] = key.id
            return key

    @router.get("/tenants/{tenant_id}/keys")
    async def list_keys(
        who: Who,
        tenant_id: AnyTenantId,
        include_inactive: bool = False,
        limit: int = Query(default=100, ge=1, le=1000),
        offset: int = Query(default=0, ge=0, le=1_000_000),
    ) -> list[KeyView]:
        return await svc.keys.page(tenant_id, include_inactive, limit, offset)

    @router.post("/tenants/{tenant_id}/keys/{key_id}/revoke")
    async def revoke_key(who: Who, tenant_id: AnyTenantId, key_id: ObjectId) -> KeyView:
        async with _audited(svc.audit, who, "key.revoke", "key", f"{tenant_id}/{key_id}"):
            return await svc.keys.revoke(tenant_id, key_id)

    @router.post("/tenants/{tenant_id}/keys/{key_id}/rotate", status_code=201)
    async def rotate_key(
        who: Who, tenant_id: AnyTenantId, key_id: ObjectId, body: KeyRotate
    ) -> NewKey:
        detail = {"overlap_s": body.overlap_s}
        async with _audited(
            svc.audit, who, "key.rotate", "key", f"{tenant_id}/{key_id}", detail
        ) as d:
            key = await svc.keys.rotate(tenant_id, key_id, body.overlap_s)
            d["new_key_id"] = key.id
            return key


def _audit_routes(router: APIRouter, svc: AdminServices) -> None:
    @router.get("/audit")
    async def read_audit(
        who: Who,
        where: Annotated[AuditFilter, Query()],
        limit: int = Query(default=100, ge=1, le=1000),
    ) -> list[AuditView]:
        """Newest first; the next page: ``before_id`` = the last id of this one."""
        return await svc.audit.read(where, limit)


def _usage_routes(router: APIRouter, svc: AdminServices) -> None:
    @router.get("/tenants/{tenant_id}/usage", response_model_by_alias=True)
    async def read_usage(
        who: Who, tenant_id: AnyTenantId, query: Annotated[UsageQuery, Query()]
    ) -> TenantUsage:
        """Tokens in/out, model calls, tool calls and ingested bytes per user or agent
        (docs/budgets.md); a tenant without usage has no items."""
        assert query.start is not None and query.end is not None  # set by the validator
        items = await svc.usage.totals(tenant_id, query.start, query.end, query.group_by)
        return TenantUsage(
            tenant_id=tenant_id, start=query.start, end=query.end, group_by=query.group_by,
            items=items,
        )  # fmt: skip

    @router.get("/tenants/{tenant_id}/budget")
    async def read_budget(who: Who, tenant_id: AnyTenantId) -> TenantBudgets:
        per_minute, per_day = await budget_override(svc.sessions, tenant_id)
        return TenantBudgets(tokens_per_minute=per_minute, tokens_per_day=per_day)

    @router.put("/tenants/{tenant_id}/budget")
    async def set_budget(who: Who, tenant_id: AnyTenantId, body: TenantBudgets) -> TenantBudgets:
        """Replace the tenant's budgets; gateways and engines see them within their
        budget cache time (``WEFT_BUDGET_CACHE_S``). Like a key, a budget may name a
        tenant that has no row (tenants from before the tenants table)."""
        async with _audited(svc.audit, who, "budget.set", "tenant", tenant_id, body.model_dump()):
            await set_budget_override(
                svc.sessions, tenant_id, tokens_per_minute=body.tokens_per_minute,
                tokens_per_day=body.tokens_per_day,
            )  # fmt: skip
        return body
