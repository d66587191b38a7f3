"""The suggestions service reads each agent's settings from agent-config (SPEC Q-01/Q-02)
with its own scoped credential, reuses them for a while, and treats a deleted agent as one
without follow-ups; a changed setting changes the set's cache key (Q-04)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from weft_contracts import FollowUpConfig
from weft_platform.retry import RetryWindow
from weft_suggestions.agent_settings import AgentSettingsClient, SettingsUnavailable
from weft_suggestions.config import UnknownAgent


class AgentConfig:
    """A stand-in agent-config answering from a dict, counting calls."""

    def __init__(self) -> None:
        self.follow_ups: dict[str, Any] = {"enabled": True, "mode": "curated", "curated": ["a?"]}
        self.calls: list[httpx.Request] = []
        self.status = 200

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.calls.append(request)
        if request.url.path.endswith("/gone"):
            return httpx.Response(404, json={"detail": "agent 'gone' not found"})
        if self.status != 200:
            return httpx.Response(self.status)
        body = {"agent_id": "a1", "settings": {"follow_ups": self.follow_ups}}
        return httpx.Response(200, json=body)


def _client(agent_config: AgentConfig, ttl_s: float = 60.0) -> AgentSettingsClient:
    return AgentSettingsClient(
        "http://agent-config",
        lambda: "service-token",
        ttl_s=ttl_s,
        transport=httpx.MockTransport(agent_config.handle),
        retry=RetryWindow(window_s=0),
    )


async def test_settings_are_read_with_the_service_credential_and_reused() -> None:
    agent_config = AgentConfig()
    client = _client(agent_config)
    first = await client.follow_ups("t1", "a1")
    second = await client.follow_ups("t1", "a1")
    assert first == second == FollowUpConfig(enabled=True, mode="curated", curated=("a?",))
    assert len(agent_config.calls) == 1
    call = agent_config.calls[0]
    assert call.headers["authorization"] == "Bearer service-token"
    assert call.url.params["tenant_id"] == "t1"
    await client.follow_ups("t2", "a1")  # another tenant is asked for separately
    assert len(agent_config.calls) == 2


async def test_a_changed_setting_is_seen_after_the_ttl_and_changes_the_key() -> None:
    agent_config = AgentConfig()
    client = _client(agent_config, ttl_s=0)
    before = await client.follow_ups("t1", "a1")
    agent_config.follow_ups = {**agent_config.follow_ups, "count": 2}
    after = await client.follow_ups("t1", "a1")
    assert after.count == 2
    assert before.config_hash() != after.config_hash()


async def test_a_deleted_agent_has_follow_ups_off() -> None:
    client = _client(AgentConfig())
    assert (await client.follow_ups("t1", "gone")).enabled is False
    with pytest.raises(UnknownAgent):
        await client.agent("t1", "gone")


async def test_agent_config_failing_is_an_error_not_follow_ups_off() -> None:
    agent_config = AgentConfig()
    agent_config.status = 503
    with pytest.raises(SettingsUnavailable):
        await _client(agent_config).follow_ups("t1", "a1")
