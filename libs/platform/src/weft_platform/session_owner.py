"""Whether a session is a live one of a given user, asked of memory (which owns the
``sessions`` table; docs/architecture.md, "Data ownership").

Every internal route that names a session but finds its data by tenant and session alone
(a workspace, a starter event) makes this check, so that a credential of one user never
reaches another user's session of the same tenant (docs/security.md "Credentials stay
inside"). The check forwards the credential the route was called with: memory's
``GET /internal/sessions/{id}`` answers 200 for a session of that tenant and user, 404
for any other (missing, deleted, another user's), 401/403 for a credential that does not
name them. Anything else (memory down, 5xx) is :class:`OwnerUnknown`: the caller answers
503, never "owned".
"""

from __future__ import annotations

from urllib.parse import quote

import httpx

from weft_platform.tracing import service_client


class OwnerUnknown(RuntimeError):
    """memory could not say (unreachable, failed): neither owned nor not."""


class SessionOwners:
    """Asks memory whether (tenant, user, session) is a live session of that user."""

    def __init__(
        self,
        memory_url: str,
        timeout_s: float = 5.0,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self._http = service_client(memory_url, timeout_s, transport=transport)

    async def owns(
        self, authorization: str | None, tenant_id: str, user_id: str, session_id: str
    ) -> bool:
        """True when memory finds the live session ``session_id`` of ``user_id`` in
        ``tenant_id`` for the caller's credential (``authorization``: the header as the
        route received it); False for any refusal; :class:`OwnerUnknown` otherwise."""
        if not authorization:
            return False
        try:
            resp = await self._http.get(
                f"/internal/sessions/{quote(session_id, safe='')}",
                params={"tenant_id": tenant_id, "user_id": user_id},
                headers={"Authorization": authorization},
            )
        except httpx.HTTPError as exc:
            raise OwnerUnknown(f"memory unreachable: {type(exc).__name__}") from exc
        if resp.status_code == 200:
            body = resp.json()
            return bool(
                isinstance(body, dict)
                and body.get("id") == session_id
                and body.get("tenant_id") == tenant_id
                and body.get("user_id") == user_id
            )
        if 400 <= resp.status_code < 500:
            return False
        raise OwnerUnknown(f"memory failed ({resp.status_code})")

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()
