"""The owners the gateway asks to purge a tenant's or a user's rows (each deletes only its
own tables, ``weft_storage.ownership``), and memory's answers about sessions and turns.

A remote owner is called on its gateway-only system routes (``weft_storage.owner_purge``)
with a service credential of the gateway (scope ``<owner>:tenant-data``); every call is
idempotent, so it is tried again within the retry window, and a failure is an
:class:`OwnerUnreachable` the purge reports, never a purge reported done. The gateway's
own tables are purged in this process through the same owner-side function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol
from urllib.parse import quote

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_platform.credentials import CredentialSigner
from weft_platform.internal_auth import bearer
from weft_platform.retry import RetryWindow, request_within
from weft_platform.tracing import service_client
from weft_storage.owner_purge import OwnerPurge, PurgeAnswer, purge_scope
from weft_storage.tenant_data import Scope

from weft_gateway.settings import GatewaySettings

MEMORY = "memory"


class OwnerUnreachable(Exception):
    """An owner did not purge or count: no answer in time, or a refusal."""

    def __init__(self, owner: str, reason: str):
        super().__init__(f"{owner}: {reason}")
        self.owner = owner
        self.reason = reason


class Owner(Protocol):
    """What the gateway asks of each owner of tenant data."""

    name: str

    async def purge(self, scope: Scope) -> PurgeAnswer:
        """Delete the scope's rows of the owner's tables; what went and what is left."""
        ...

    async def residue(self, scope: Scope) -> dict[str, int]:
        """Rows of the scope left in the owner's tables."""
        ...


class LocalOwner:
    """An owner whose purge runs in this process: the gateway's own tables."""

    def __init__(self, name: str, sessions: async_sessionmaker[AsyncSession]):
        self.name = name
        self._owner = OwnerPurge(name, sessions)

    def _scope(self, scope: Scope) -> Scope:
        return self._owner.scope(scope.tenant_id, scope.user_id, scope.session_ids or ())

    async def purge(self, scope: Scope) -> PurgeAnswer:
        return await self._owner.purge(self._scope(scope))

    async def residue(self, scope: Scope) -> dict[str, int]:
        return await self._owner.residue(self._scope(scope))


class RemoteOwner:
    """An owning service, asked over its internal purge routes."""

    def __init__(
        self,
        name: str,
        base_url: str,
        credential: Callable[[str, str], str],
        *,
        timeout_s: float,
        retry: RetryWindow,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self.name = name
        self._credential = credential
        self._retry = retry
        self._http = service_client(base_url, timeout_s, transport=transport)

    async def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """The JSON answer of an idempotent call; OwnerUnreachable when none came."""
        headers = bearer(self._credential(self.name, purge_scope(self.name)))
        try:
            resp = await request_within(
                self._http, self._retry, method, path, resend=True, headers=headers, **kwargs
            )
        except httpx.HTTPError as exc:
            raise OwnerUnreachable(self.name, f"no answer ({type(exc).__name__})") from exc
        if resp.status_code >= 400:
            raise OwnerUnreachable(self.name, f"answered {resp.status_code}: {resp.text[:300]}")
        return resp.json()

    async def purge(self, scope: Scope) -> PurgeAnswer:
        if scope.user_id is None:
            answer = await self.call("DELETE", _tenant_path(scope))
        else:
            body = {"session_ids": list(scope.session_ids or ())}
            answer = await self.call("DELETE", _tenant_path(scope), json=body)
        return PurgeAnswer.model_validate(answer)

    async def residue(self, scope: Scope) -> dict[str, int]:
        if scope.user_id is None:
            answer = await self.call("GET", _tenant_path(scope))
        else:
            body = {"session_ids": list(scope.session_ids or ())}
            answer = await self.call("POST", _tenant_path(scope) + "/residue", json=body)
        return {str(t): int(n) for t, n in answer["residue"].items()}

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()


class MemoryOwner(RemoteOwner):
    """memory: an owner, and the one that knows a tenant's sessions and turns."""

    async def session_ids(self, scope: Scope) -> list[str]:
        """The scope's sessions (deleted ones included)."""
        params = {} if scope.user_id is None else {"user_id": scope.user_id}
        path = f"/internal/tenants/{_quoted(scope.tenant_id)}/session-ids"
        return [str(s) for s in (await self.call("GET", path, params=params))["session_ids"]]

    async def request_ids(self, tenant_id: str, session_ids: Sequence[str]) -> list[str]:
        """The turns of these sessions."""
        if not session_ids:
            return []
        path = f"/internal/tenants/{_quoted(tenant_id)}/turn-ids"
        answer = await self.call("POST", path, json={"session_ids": list(session_ids)})
        return [str(r) for r in answer["request_ids"]]

    async def delete_messages_older_than(self, tenant_id: str, days: float) -> int:
        """Retention: the tenant's messages older than ``days`` deleted; how many."""
        path = f"/internal/tenants/{_quoted(tenant_id)}/messages"
        answer = await self.call("DELETE", path, params={"older_than_days": days})
        return int(answer["deleted"].get("messages", 0))


def _quoted(value: str) -> str:
    """``value`` as one path segment: a segment of dots only is encoded too, or the HTTP
    client would resolve it (``users/../data`` is the whole tenant's route); the owner
    refuses such an id."""
    segment = quote(value, safe="")
    return segment.replace(".", "%2E") if not segment.strip(".") else segment


def _tenant_path(scope: Scope) -> str:
    path = f"/internal/tenants/{_quoted(scope.tenant_id)}"
    if scope.user_id is not None:
        path += f"/users/{_quoted(scope.user_id)}"
    return path + "/data"


def tenant_data_owners(
    s: GatewaySettings, sessions: async_sessionmaker[AsyncSession], signer: CredentialSigner
) -> tuple[MemoryOwner, list[Owner]]:
    """Every owner of tenant data (``weft_storage.ownership.OWNERS``) as a purge asks it:
    memory, and the others in the order they are purged (memory goes last)."""

    def credential(audience: str, scope: str) -> str:
        return signer.service(audience, [scope])

    retry = RetryWindow(window_s=s.internal_retry_window_s)
    opts: dict[str, Any] = {"timeout_s": s.purge_timeout_s, "retry": retry}
    owners: list[Owner] = [
        LocalOwner("gateway", sessions),
        RemoteOwner("agent-config", s.agent_config_url, credential, **opts),
        RemoteOwner("knowledge", s.knowledge_url, credential, **opts),
        RemoteOwner("sandbox", s.sandbox_url, credential, **opts),
        RemoteOwner("suggestions", s.suggestions_url, credential, **opts),
    ]
    return MemoryOwner(MEMORY, s.memory_url, credential, **opts), owners
