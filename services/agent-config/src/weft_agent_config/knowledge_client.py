"""The knowledge service as agent-config reaches it: which knowledge bases a tenant has
(the KB guard, SPEC A-07, and the ``{{knowledge_bases}}`` placeholder) and a few document
titles (suggestion settings' starters, SPEC Q-01).

agent-config presents its own service credential (issuer ``agent-config``): it asks while
resolving for a turn, while saving an agent, and for the suggestions service, which has
no request behind it; the routes name the tenant, which agent-config has already checked
against its own caller's credential.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from fastapi import HTTPException
from weft_platform.internal_auth import bearer
from weft_platform.tracing import service_client

BASES_SCOPE = "knowledge:bases.read"
TITLES_SCOPE = "knowledge:titles.read"


class KnowledgeService:
    """knowledge's lookup routes; a missing KB is None, knowledge down is a 503."""

    def __init__(
        self,
        base_url: str,
        credential: Callable[[list[str]], str],
        *,
        timeout_s: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        """``credential(scopes)``: a service credential for knowledge with ``scopes``."""
        self._credential = credential
        self._http = service_client(base_url, timeout_s, transport=transport)

    async def _send(self, scope: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = bearer(self._credential([scope]))
        try:
            resp = await self._http.request(method, path, headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            raise HTTPException(
                503, f"knowledge unavailable: {type(exc).__name__}; retry", {"Retry-After": "2"}
            ) from exc
        if resp.status_code >= 500 or resp.status_code in (401, 403):
            raise HTTPException(503, f"knowledge failed ({resp.status_code})", {"Retry-After": "2"})
        return resp

    async def knowledge_bases(
        self, tenant_id: str, kb_ids: list[str], limit: int
    ) -> tuple[list[dict[str, Any]], str | None]:
        """(the tenant's KBs ``kb_ids`` in order, or its first ``limit``; the reason
        when some id is not the tenant's)."""
        body = {"tenant_id": tenant_id, "knowledge_base_ids": kb_ids, "limit": limit}
        resp = await self._send(BASES_SCOPE, "POST", "/internal/knowledge-bases/lookup", json=body)
        if resp.status_code == 404:
            return [], str(resp.json().get("detail", "knowledge bases not found"))
        found: list[dict[str, Any]] = resp.json()
        return found, None

    async def titles(self, tenant_id: str, kb_ids: list[str], limit: int) -> list[dict[str, Any]]:
        """The newest ready documents of ``kb_ids`` (every KB of the tenant when empty)."""
        params = httpx.QueryParams(
            [("tenant_id", tenant_id), ("limit", str(limit)), *(("kb_id", k) for k in kb_ids)]
        )
        resp = await self._send(TITLES_SCOPE, "GET", "/internal/document-titles", params=params)
        found: list[dict[str, Any]] = resp.json() if resp.status_code == 200 else []
        return found

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()
