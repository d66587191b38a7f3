"""``POST /internal/turn-credentials/renew``: a waiting turn's credential renewed for
memory's expiry timer (docs/approvals.md, Flow 4).

A prompt can wait longer than its turn's credential lives. When its timer fires, memory
presents the credential it recorded with the prompt and gets a fresh one for the same
turn, which its ``ApprovalDecided`` (timeout) carries to the engine: the turn continues
with a new credential, never by stretching the old one.

Only memory may ask (a service credential of issuer ``memory`` for audience ``gateway``
with scope ``credentials:renew``: 401 without one, 403 for another issuer or scope). The
old token must be a turn credential the gateway signed (its signature is checked at its
own issued time: its expiry is ignored), issued at most ``max_age_s`` ago (8 days: a
prompt waits at most 7 days plus its escalation), of a tenant that is still active; any
refusal of it is 403 with the reason, which memory must not retry. The new credential has
the same tenant, user, session, request and knowledge bases, audience ``TURN_AUDIENCE``
and a turn deadline's life.
"""

# No ``from __future__ import annotations``: FastAPI must see the route annotations.

import time
from dataclasses import dataclass
from typing import Annotated

import jwt
from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_platform.credentials import (
    RECORDS,
    TURN_AUDIENCE,
    CredentialRejected,
    CredentialSigner,
    CredentialVerifier,
    RequestCredential,
    ServiceCredential,
)
from weft_storage.gateway.models_admin import Tenant

from weft_gateway.approvals_api import capped_body

RENEW_PATH = "/internal/turn-credentials/renew"
RENEW_SCOPE = "credentials:renew"
RENEW_ISSUERS = frozenset({"memory"})
GATEWAY_AUDIENCE = "gateway"
MAX_BODY_BYTES = 16 * 1024


class RenewBody(BaseModel):
    """The turn credential to renew."""

    credential: str = Field(min_length=1, max_length=4096)


class Renewed(BaseModel):
    """The new turn credential."""

    credential: str


@dataclass(kw_only=True)
class TurnRenewal:
    """Checks the caller and the old credential, mints the new one."""

    verifier: CredentialVerifier
    signer: CredentialSigner
    sessions: async_sessionmaker[AsyncSession]
    ttl_s: float
    max_age_s: float = 8 * 86400

    def caller(self, request: Request) -> ServiceCredential:
        """Memory's service credential with ``credentials:renew``, or 401/403."""
        header = request.headers.get("authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else ""
        try:
            if not token:
                raise CredentialRejected(401, "missing service credential (Authorization)")
            return self.verifier.verify_service(
                token, GATEWAY_AUDIENCE, RENEW_SCOPE, issuers=RENEW_ISSUERS
            )
        except CredentialRejected as exc:
            headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
            raise HTTPException(exc.status, exc.reason, headers) from None

    async def renew(self, old: str) -> str:
        """The new credential for the turn of ``old``; 403 with the reason otherwise."""
        turn = self.turn_of(old)
        await self._require_active(turn.tenant_id)
        return self.signer.request(
            tenant_id=turn.tenant_id,
            user_id=turn.user_id,
            session_id=turn.session_id,
            request_id=turn.request_id,
            knowledge_base_ids=turn.knowledge_base_ids,
            audience=TURN_AUDIENCE,
            ttl_s=self.ttl_s,
        )

    def turn_of(self, old: str) -> RequestCredential:
        """The verified turn credential in ``old`` (signature at its issued time)."""
        try:
            issued = jwt.decode(old, options={"verify_signature": False}).get("iat")
        except jwt.PyJWTError:
            raise _refused("malformed credential") from None
        if not isinstance(issued, int | float):
            raise _refused("credential without an issued time")
        try:
            # Turn credentials alone may ride on records (audience ``kafka``): a plain API
            # request's credential fails here.
            turn = self.verifier.verify_request(old, RECORDS, at=float(issued))
        except CredentialRejected as exc:
            raise _refused(exc.reason) from None
        if turn.session_id is None or turn.request_id is None:
            raise _refused("not a turn credential (no session or request)")
        age_s = time.time() - turn.issued_at
        if age_s > self.max_age_s:
            raise _refused(f"issued {age_s / 86400:.1f} days ago; the limit is "
                           f"{self.max_age_s / 86400:.1f} days")  # fmt: skip
        return turn

    async def _require_active(self, tenant_id: str) -> None:
        # A tenant without a row counts as active, as for its API keys (auth).
        try:
            async with self.sessions() as s:
                status = await s.scalar(select(Tenant.status).where(Tenant.id == tenant_id))
        except (SQLAlchemyError, OSError) as exc:
            raise HTTPException(503, "tenant store busy", {"Retry-After": "1"}) from exc
        if status is not None and status != "active":
            raise _refused(f"tenant is {status}")


def _refused(reason: str) -> HTTPException:
    return HTTPException(403, f"turn credential not renewed: {reason}")


def renewal_router(renewal: TurnRenewal) -> APIRouter:
    """The renewal route (internal: memory calls it)."""
    router = APIRouter(tags=["internal"], include_in_schema=False)
    Caller = Annotated[ServiceCredential, Depends(renewal.caller)]

    @router.post(RENEW_PATH, dependencies=[Depends(capped_body(MAX_BODY_BYTES))])
    async def renew(caller: Caller, body: RenewBody) -> Renewed:
        return Renewed(credential=await renewal.renew(body.credential))

    return router
