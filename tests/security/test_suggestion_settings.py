"""An agent's suggestion settings (SPEC Q-01/Q-02): hostile values are refused when the agent
is saved, and the route the suggestions service reads them through opens for its own
scoped credential only and never shows one tenant another tenant's agent (invariant 5).
agent-config runs in process on the real PostgreSQL."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi import HTTPException
from weft_agent_config.agent_service import AgentService
from weft_agent_config.app import create_app
from weft_agent_config.catalogs import BuiltinAgents, TypePresets
from weft_platform.credentials import load_signer
from weft_testkit.credentials import DevCredentials, credentials_dir

SETTINGS = "/internal/suggestion-settings"


def _service() -> AgentService:
    return AgentService(None, BuiltinAgents.load(), TypePresets.load(), "m")  # type: ignore[arg-type]


def _refused(settings: dict[str, Any]) -> HTTPException:
    with pytest.raises(HTTPException) as caught:
        _service().validate({"name": "a", "question_suggestions": settings}, apply_preset=False)
    return caught.value


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"follow_ups": {"count": 1000}}, "count"),
        ({"follow_ups": {"count": 0}}, "count"),
        ({"starters": {"count": 9}}, "count"),
        ({"follow_ups": {"additional_instruction": "x" * 2001}}, "additional_instruction"),
        ({"starters": {"additional_instruction": "x" * 100_000}}, "additional_instruction"),
        ({"follow_ups": {"max_context_turns": 50}}, "max_context_turns"),
        ({"follow_ups": {"curated": ["q"] * 21}}, "curated"),
        ({"follow_ups": {"curated": ["q" * 501]}}, "curated"),
        ({"follow_ups": {"categories": []}}, "categories"),
        ({"follow_ups": {"categories": ["exfiltrate"]}}, "categories"),
        ({"follow_ups": {"mode": "shell"}}, "mode"),
        ({"follow_ups": {"model_id": "m" * 201}}, "model_id"),
        ({"follow_ups": {"webhook": "http://evil"}}, "webhook"),
    ],
)
def test_hostile_settings_are_refused_with_the_field(settings: dict[str, Any], field: str) -> None:
    refusal = _refused(settings)
    assert refusal.status_code == 422
    errors: list[dict[str, Any]] = refusal.detail  # type: ignore[assignment]
    assert any(field in [str(part) for part in e["loc"]] for e in errors)


def test_sane_settings_are_kept_and_legacy_modes_read_as_today() -> None:
    agent = _service().validate(
        {
            "name": "a",
            "question_suggestions": {
                "starters": {"mode": "static", "count": 8, "curated": ["Hi?"]},
                "follow_ups": {"enabled": True, "mode": "llm", "count": 5},
            },
        },
        apply_preset=False,
    )
    assert agent.question_suggestions is not None
    assert agent.question_suggestions.starters.mode == "curated"
    assert agent.question_suggestions.follow_ups.mode == "generated"
    assert agent.question_suggestions.follow_ups.count == 5


@dataclass
class Stack:
    client: httpx.AsyncClient
    tenant: str
    other: str
    agent_id: str


@pytest.fixture
async def stack(migrated: str) -> AsyncIterator[Stack]:
    app = create_app()
    keys = DevCredentials.load()
    tenant, other = "t-sset-a-" + secrets.token_hex(3), "t-sset-b-" + secrets.token_hex(3)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://agent-config") as client:
        created = await client.post(
            "/internal/agents",
            params={"tenant_id": tenant, "user_id": "u1"},
            json={
                "name": "Pricing",
                "description": "Answers about our prices",
                "question_suggestions": {
                    "follow_ups": {"enabled": True, "mode": "curated", "curated": ["Plans?"]}
                },
            },
            headers={"Authorization": f"Bearer {keys.request(tenant, 'u1')}"},
        )
        assert created.status_code == 201, created.text
        yield Stack(client, tenant, other, created.json()["id"])
    await app.state.runtime.db.dispose()
    await app.state.runtime.redis.aclose()


def _suggestions_credential(scope: str = "agent-config:suggestion-settings") -> dict[str, str]:
    signer = load_signer(credentials_dir(), "suggestions")
    return {"Authorization": f"Bearer {signer.service('agent-config', [scope])}"}


async def test_the_suggestions_service_reads_an_agents_settings(stack: Stack) -> None:
    resp = await stack.client.get(
        f"{SETTINGS}/{stack.agent_id}",
        params={"tenant_id": stack.tenant},
        headers=_suggestions_credential(),
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["name"] == "Pricing"
    assert body["settings"]["follow_ups"]["curated"] == ["Plans?"]
    assert body["settings"]["starters"]["count"] == 6  # SPEC Q-01 default


async def test_another_tenant_gets_no_settings_of_an_agent_it_does_not_have(stack: Stack) -> None:
    resp = await stack.client.get(
        f"{SETTINGS}/{stack.agent_id}",
        params={"tenant_id": stack.other},
        headers=_suggestions_credential(),
    )
    assert resp.status_code == 404
    assert "Plans?" not in resp.text


async def test_only_the_scoped_service_credential_opens_the_route(stack: Stack) -> None:
    keys = DevCredentials.load()
    path, params = f"{SETTINGS}/{stack.agent_id}", {"tenant_id": stack.tenant}
    as_user = {"Authorization": f"Bearer {keys.request(stack.tenant, 'u1')}"}
    other_scope = _suggestions_credential("agent-config:organisations")
    engine = load_signer(credentials_dir(), "engine")
    as_engine = {
        "Authorization": "Bearer "
        + engine.service("agent-config", ["agent-config:suggestion-settings"])
    }
    codes = [
        (await stack.client.get(path, params=params, headers=h)).status_code
        for h in ({}, as_user, other_scope, as_engine)
    ]
    assert codes == [401, 401, 403, 403]
