"""The FastAPI dependency every internal route of a service goes through.

A route is either a **tenant route** (the default: it acts for one tenant and user) or a
**system route** (named in ``system_routes`` with the scope it needs). A tenant route
wants a request credential for this service whose tenant, user and session agree with
every ``tenant_id``, ``user_id`` and ``session_id`` the request names (query, path or
JSON body); a system route wants a service credential with its scope. Neither kind opens
the other's routes, except a system route marked ``also_requests``, which both open.
Missing, malformed, expired or wrong-audience: 401; valid but for
another tenant, user, session or scope: 403.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException, Request

from weft_platform.credentials import (
    CredentialRejected,
    CredentialVerifier,
    RequestCredential,
    ServiceCredential,
)

HEADER = "authorization"
SCHEME = "bearer "

outbound_credential: ContextVar[str | None] = ContextVar("outbound_credential", default=None)
"""The credential the current request's internal calls carry (the gateway sets it once
per accepted request, its clients send it on every call made while serving it)."""


@dataclass(frozen=True)
class SystemRoute:
    """A route for system work: the scope it needs and the issuers that may hold it.

    ``also_requests``: the route is a tenant route too, opened as well by a request
    credential (checked like any tenant route's); the route itself then narrows what a
    request credential sees (memory's suspended turns: the engine's auditor reads any,
    a turn only its own)."""

    scope: str
    issuers: frozenset[str]
    also_requests: bool = False


def bearer(token: str | None) -> dict[str, str]:
    """The header that presents ``token`` (none when there is no token)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


class InternalAuth:
    """Verifies the credential of a request to one service's internal routes."""

    def __init__(
        self,
        verifier: CredentialVerifier,
        audience: str,
        system_routes: Mapping[str, SystemRoute] | None = None,
    ):
        self._verifier = verifier
        self._audience = audience
        self._system = dict(system_routes or {})

    @property
    def system_routes(self) -> Mapping[str, SystemRoute]:
        """Route paths (as declared) that want a service credential, with their scope."""
        return self._system

    async def __call__(self, request: Request) -> RequestCredential | ServiceCredential:
        token = _presented(request)
        route = getattr(request.scope.get("route"), "path", request.url.path)
        try:
            if token is None:
                raise CredentialRejected(401, "missing service credential (Authorization)")
            system = self._system.get(route)
            if system is not None and system.also_requests:
                system = system if self._verifier.kind(token) == "service" else None
            credential: RequestCredential | ServiceCredential
            if system is not None:
                credential = self._verifier.verify_service(
                    token, self._audience, system.scope, issuers=system.issuers
                )
            else:
                credential = self._verifier.verify_request(token, self._audience)
                _agrees(credential, await _named(request))
        except CredentialRejected as exc:
            headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
            raise HTTPException(exc.status, exc.reason, headers) from None
        request.state.credential = credential
        return credential


def caller_user(request: Request) -> str | None:
    """The user whose request credential opened this route (``InternalAuth`` put it on the
    request); None for a service credential or a route mounted without the guard.

    A tenant route that filters by an optional ``user_id`` filters by this one when the
    request names none: an omitted filter must narrow to the caller, never widen to the
    tenant (``_agrees`` has already refused a named user that is not the caller)."""
    credential = getattr(request.state, "credential", None)
    return credential.user_id if isinstance(credential, RequestCredential) else None


def caller_knowledge_bases(request: Request) -> tuple[str, ...] | None:
    """The knowledge bases the request credential's key is limited to (SPEC A-09); None:
    unrestricted, a service credential, or a route mounted without the guard."""
    credential = getattr(request.state, "credential", None)
    return credential.knowledge_base_ids if isinstance(credential, RequestCredential) else None


def narrowest(named: Sequence[str] | None, credential: Sequence[str] | None) -> list[str] | None:
    """The tighter of two KB restrictions (None: unrestricted): what a request names can
    only narrow what its credential allows, never widen it."""
    if credential is None:
        return None if named is None else list(named)
    if named is None:
        return list(credential)
    allowed = set(credential)
    return [kb for kb in named if kb in allowed]


def _presented(request: Request) -> str | None:
    value = request.headers.get(HEADER, "")
    if not value.lower().startswith(SCHEME):
        return None
    return value[len(SCHEME) :].strip() or None


def _agrees(credential: RequestCredential, named: Iterator[tuple[str, str]]) -> None:
    """403 unless every tenant, user and session the request names is the credential's
    (a credential without a session may name any session of its user)."""
    for name, value in named:
        if name == "tenant_id" and value != credential.tenant_id:
            raise CredentialRejected(403, "credential is for another tenant")
        if name == "user_id" and value and value != credential.user_id:
            raise CredentialRejected(403, "credential is for another user")
        if name == "session_id" and credential.session_id and value != credential.session_id:
            raise CredentialRejected(403, "credential is for another session")


async def _named(request: Request) -> Iterator[tuple[str, str]]:
    """Every (name, value) the request gives for tenant_id, user_id and session_id."""
    found: list[tuple[str, str]] = []
    wanted = ("tenant_id", "user_id", "session_id")
    for name in wanted:
        found += [(name, v) for v in request.query_params.getlist(name)]
        if name in request.path_params:
            found.append((name, str(request.path_params[name])))
    body = await _json_body(request)
    for name in wanted:
        if isinstance(body.get(name), str):
            found.append((name, body[name]))
    return iter(found)


async def _json_body(request: Request) -> dict[str, Any]:
    if "json" not in request.headers.get("content-type", ""):
        return {}
    try:
        body = json.loads(await request.body() or b"null")
    except (ValueError, UnicodeDecodeError):
        return {}  # the route's own validation answers 422
    return body if isinstance(body, dict) else {}
