"""Each agent's suggestion settings, read from agent-config (SPEC Q-01/Q-02) with this
service's own credential, and kept a short while.

The system route ``/internal/suggestion-settings/{agent_id}`` needs the scope
``agent-config:suggestion-settings``: follow-ups are made from Kafka records and by the
sweeper, long after the user's request credential expired, so no request credential is
at hand. The cache bounds the calls to one per agent and ``ttl_s``; a saved change is
seen within ``ttl_s`` and, because the settings hash is part of the cache key (Q-04),
gets new sets instead of the stale ones.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from urllib.parse import quote

import httpx
from weft_contracts import AgentSuggestionSettings, FollowUpConfig
from weft_platform.internal_auth import bearer
from weft_platform.retry import RetryWindow, request_within
from weft_platform.tracing import propagation_hooks

from weft_suggestions.config import UnknownAgent

SCOPE = "agent-config:suggestion-settings"


class SettingsUnavailable(RuntimeError):
    """agent-config could not be asked (down, 5xx, refused our credential)."""


class AgentSettingsClient:
    """:class:`weft_suggestions.config.AgentSettings` over agent-config's internal HTTP."""

    def __init__(
        self,
        base_url: str,
        credential: Callable[[], str],
        *,
        ttl_s: float = 30.0,
        max_entries: int = 4096,
        transport: httpx.AsyncBaseTransport | None = None,
        retry: RetryWindow = RetryWindow(window_s=5.0),
    ):
        self._http = httpx.AsyncClient(
            base_url=base_url, timeout=10.0, transport=transport, event_hooks=propagation_hooks()
        )
        self._credential = credential
        self._ttl_s = ttl_s
        self._max = max_entries
        self._retry = retry
        self._cache: OrderedDict[tuple[str, str], tuple[float, AgentSuggestionSettings | None]]
        self._cache = OrderedDict()

    async def follow_ups(self, tenant_id: str, agent_id: str) -> FollowUpConfig:
        """The agent's follow-up settings; an unknown (deleted) agent gets none (off)."""
        try:
            return (await self.agent(tenant_id, agent_id)).settings.follow_ups
        except UnknownAgent:
            return FollowUpConfig(enabled=False)

    async def agent(self, tenant_id: str, agent_id: str) -> AgentSuggestionSettings:
        """The agent's settings (cached ``ttl_s``); raises :class:`UnknownAgent` or
        :class:`SettingsUnavailable`."""
        key = (tenant_id, agent_id)
        cached = self._cache.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return _known(cached[1], agent_id)
        found = await self._fetch(tenant_id, agent_id)
        self._cache[key] = (time.monotonic() + self._ttl_s, found)
        self._cache.move_to_end(key)
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)
        return _known(found, agent_id)

    async def _fetch(self, tenant_id: str, agent_id: str) -> AgentSuggestionSettings | None:
        path = f"/internal/suggestion-settings/{quote(agent_id, safe='')}"
        try:
            resp = await request_within(
                self._http,
                self._retry,
                "GET",
                path,
                resend=True,
                params={"tenant_id": tenant_id},
                headers=bearer(self._credential()),
            )
        except httpx.HTTPError as exc:
            raise SettingsUnavailable(f"agent-config unreachable: {exc!r}") from exc
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise SettingsUnavailable(
                f"agent-config answered {resp.status_code}: {resp.text[:200]}"
            )
        return AgentSuggestionSettings.model_validate(resp.json())

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()


def _known(found: AgentSuggestionSettings | None, agent_id: str) -> AgentSuggestionSettings:
    if found is None:
        raise UnknownAgent(agent_id)
    return found
