"""The owner's side of a tenant or user purge: each owning service deletes and counts the
rows of its own tables (``OWNERS[service]``), on the gateway's request.

Mounted by every owner with one line (``app.include_router(owner_purge_router(...))``,
beside, not among, the routers its ``InternalAuth`` guards as tenant routes). Routes, all
system routes for the gateway's service credential alone (scope ``<service>:tenant-data``):

- ``DELETE /internal/tenants/{tenant_id}/data``: purge the tenant; ``{"deleted": {table:
  n}, "residue": {table: n}}`` (the residue is zero when done).
- ``GET`` the same path: ``{"residue": {...}}``.
- ``DELETE /internal/tenants/{tenant_id}/users/{user_id}/data``: purge one user; the JSON
  body ``{"session_ids": [...]}`` names the user's sessions (memory, which owns
  ``sessions``, told the gateway) for an owner whose tables say only the session.
- ``POST /internal/tenants/{tenant_id}/users/{user_id}/data/residue``: the user's
  residue (a POST: the session ids are a body, too long for a query string).

Deleting is batched and idempotent: a purge stopped midway (a crash, a timeout of the
caller) is finished by the next request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated

from fastapi import APIRouter, Body, Depends, HTTPException, Path, Request
from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_platform.credentials import (
    GATEWAY,
    CredentialRejected,
    CredentialVerifier,
    ServiceCredential,
)

from weft_storage.ownership import OWNERS
from weft_storage.tenant_data import Scope, count_rows, delete_rows

TENANT_ID = r"^[A-Za-z0-9_.:-]*[A-Za-z0-9_:-][A-Za-z0-9_.:-]*$"
"""As the admin API accepts (ids from before the tenants table may hold ``:``), but not
made of dots only (``..``: a path segment, never a tenant an owner should act on)."""
USER_ID = r"^[A-Za-z0-9_.:@-]*[A-Za-z0-9_:@-][A-Za-z0-9_.:@-]*$"
MAX_SESSIONS = 100_000
"""Most session ids one user-scope request names."""

TenantId = Annotated[str, Path(min_length=1, max_length=128, pattern=TENANT_ID)]
UserId = Annotated[str, Path(min_length=1, max_length=128, pattern=USER_ID)]
SessionId = Annotated[str, Field(min_length=1, max_length=128)]

TENANT_DATA_PATH = "/internal/tenants/{tenant_id}/data"
USER_DATA_PATH = "/internal/tenants/{tenant_id}/users/{user_id}/data"


def purge_scope(service: str) -> str:
    """The scope a service credential needs for ``service``'s purge routes."""
    return f"{service}:tenant-data"


class PurgeAnswer(BaseModel):
    """What an owner deleted and what of the scope is left in its tables."""

    deleted: dict[str, int]
    residue: dict[str, int]


class ResidueAnswer(BaseModel):
    """What of the scope is left in an owner's tables (all zero: nothing)."""

    residue: dict[str, int]


class UserSessions(BaseModel):
    """Body of the user-scope routes: the user's sessions (as memory lists them)."""

    session_ids: list[SessionId] = Field(default_factory=list, max_length=MAX_SESSIONS)


class OwnerPurge:
    """Purges and counts a scope's rows in one owner's tables, and nowhere else."""

    def __init__(self, service: str, sessions: async_sessionmaker[AsyncSession]):
        self.service = service
        self.tables: tuple[str, ...] = OWNERS[service]
        self._sessions = sessions

    def scope(
        self, tenant_id: str, user_id: str | None = None, session_ids: Sequence[str] = ()
    ) -> Scope:
        """The scope; the owner of ``sessions`` finds a user's sessions itself, any other
        owner takes them from the caller."""
        if user_id is None or "sessions" in self.tables:
            return Scope(tenant_id, user_id)
        return Scope(tenant_id, user_id, tuple(session_ids))

    async def purge(self, scope: Scope) -> PurgeAnswer:
        """Delete the scope's rows of this owner's tables; what went and what is left."""
        deleted = await delete_rows(self._sessions, scope, self.tables)
        return PurgeAnswer(
            deleted={t: n for t, n in deleted.items() if n}, residue=await self.residue(scope)
        )

    async def residue(self, scope: Scope) -> dict[str, int]:
        """Rows of the scope per table of this owner."""
        return await count_rows(self._sessions, scope, self.tables)


class GatewayOnly:
    """The guard of every purge route: the gateway's service credential for this service
    with ``<service>:tenant-data``, whatever the route (a tenant's request credential,
    another service's or an operator's credential, none: refused, 401 or 403)."""

    def __init__(self, service: str, verifier: CredentialVerifier):
        self._verifier = verifier
        self._audience = service
        self._scope = purge_scope(service)

    async def __call__(self, request: Request) -> ServiceCredential:
        value = request.headers.get("authorization", "")
        token = value[len("bearer ") :].strip() if value.lower().startswith("bearer ") else ""
        try:
            if not token:
                raise CredentialRejected(401, "missing service credential (Authorization)")
            credential = self._verifier.verify_service(
                token, self._audience, self._scope, issuers=frozenset({GATEWAY})
            )
        except CredentialRejected as exc:
            headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
            raise HTTPException(exc.status, exc.reason, headers) from None
        request.state.credential = credential
        return credential


def owner_purge_router(
    service: str,
    sessions: async_sessionmaker[AsyncSession],
    verifier: CredentialVerifier,
    *,
    extra: Sequence[Callable[[APIRouter], None]] = (),
) -> APIRouter:
    """The purge routes of ``service`` (module docstring), plus the routes ``extra`` adds
    for the gateway (memory's session and turn lists, retention), all behind
    :class:`GatewayOnly`."""
    owner = OwnerPurge(service, sessions)
    router = APIRouter(tags=["internal"], dependencies=[Depends(GatewayOnly(service, verifier))])

    @router.delete(TENANT_DATA_PATH)
    async def purge_tenant(tenant_id: TenantId) -> PurgeAnswer:
        return await owner.purge(owner.scope(tenant_id))

    @router.get(TENANT_DATA_PATH)
    async def tenant_residue(tenant_id: TenantId) -> ResidueAnswer:
        return ResidueAnswer(residue=await owner.residue(owner.scope(tenant_id)))

    @router.delete(USER_DATA_PATH)
    async def purge_user(
        tenant_id: TenantId, user_id: UserId, body: Annotated[UserSessions | None, Body()] = None
    ) -> PurgeAnswer:
        sids = body.session_ids if body is not None else []
        return await owner.purge(owner.scope(tenant_id, user_id, sids))

    @router.post(USER_DATA_PATH + "/residue")
    async def user_residue(
        tenant_id: TenantId, user_id: UserId, body: Annotated[UserSessions | None, Body()] = None
    ) -> ResidueAnswer:
        sids = body.session_ids if body is not None else []
        return ResidueAnswer(residue=await owner.residue(owner.scope(tenant_id, user_id, sids)))

    for add in extra:
        add(router)
    return router
