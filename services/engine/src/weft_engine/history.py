"""HistoryClient: the engine asks memory for LLM-ready history at each turn (SPEC E-01)."""

from __future__ import annotations

from typing import Any

import httpx


class HistoryUnavailable(Exception):
    """memory could not give the history."""


class HistoryClient:
    """Reads ``GET /internal/sessions/{id}/history`` of the memory service."""

    def __init__(self, base_url: str, timeout_s: float = 10.0):
        self._http = httpx.AsyncClient(base_url=base_url, timeout=timeout_s)

    async def load(self, tenant_id: str, session_id: str, max_turns: int) -> list[dict[str, Any]]:
        """History messages, oldest first; an unknown session has none."""
        try:
            resp = await self._http.get(
                f"/internal/sessions/{session_id}/history",
                params={"tenant_id": tenant_id, "max_turns": max_turns},
            )
        except httpx.HTTPError as exc:
            raise HistoryUnavailable(f"memory unreachable: {exc}") from exc
        if resp.status_code == 404:
            return []
        if resp.status_code != 200:
            raise HistoryUnavailable(f"memory answered {resp.status_code}: {resp.text[:200]}")
        messages: list[dict[str, Any]] = resp.json()["messages"]
        return messages

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()
