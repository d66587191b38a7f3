"""Suggested questions of the public API across tenants and users (SPEC Q-05, invariant 5),
on a whole stack: every suggestion route with another tenant's (or user's) session or
message answers 404 as a missing one and shows nothing of it; hostile input is 401/422
with the reason."""

from __future__ import annotations

import asyncio
import secrets

import httpx
import pytest
from weft_contracts import assistant_message_id
from weft_testkit import LocalStack, read_turn

from tests.stack_fixtures import ApiKeys

CURATED = "Show me the secret plans"


async def _owned_message(stack: LocalStack, api: httpx.AsyncClient) -> tuple[str, str]:
    """Tenant A's session and an assistant message whose follow-ups are ready."""
    agent = await api.post(
        "/api/v1/agents",
        json={
            "name": "A",
            "question_suggestions": {
                "follow_ups": {"enabled": True, "mode": "curated", "curated": [CURATED]}
            },
        },
    )
    assert agent.status_code == 201, agent.text
    created = await api.post("/api/v1/sessions", json={"agent_id": agent.json()["id"]})
    session = str(created.json()["id"])
    turn = await read_turn(
        api, f"/api/v1/agent-chat/{session}", api_key=stack.api_key,
        json_body={"query": "hello " + secrets.token_hex(2)},
    )  # fmt: skip
    message = assistant_message_id(turn[0].data["id"])
    path = f"/api/v1/sessions/{session}/suggestions"
    for _ in range(600):
        got = await api.get(path, params={"assistant_message_id": message})
        if got.status_code == 200 and got.json()["state"] == "ready":
            assert CURATED in got.text
            return session, message
        await asyncio.sleep(0.1)
    raise AssertionError(f"follow-ups of {message} never ready: {got.status_code} {got.text}")


async def _every_route(
    client: httpx.AsyncClient, session: str, message: str
) -> list[httpx.Response]:
    path = f"/api/v1/sessions/{session}"
    body = {"assistant_message_id": message}
    return [
        await client.get(f"{path}/suggestions", params=body),
        await client.post(f"{path}/suggestions", json=body),
        await client.post(f"{path}/suggestion-events", json={**body, "kind": "click"}),
        await client.get(f"{path}/starters"),
        await client.post(
            f"{path}/suggestion-events",
            json={"placement": "starter", "question_id": "c0", "kind": "click"},
        ),
    ]


async def test_another_tenant_or_user_finds_nothing_on_every_route(
    stack: LocalStack, api: httpx.AsyncClient, api_keys: ApiKeys
) -> None:
    session, message = await _owned_message(stack, api)
    other_tenant = (await api_keys.client(tenant="t-other-" + secrets.token_hex(3))).http
    other_user = (await api_keys.client(user="someone-else")).http
    for client in (other_tenant, other_user):
        responses = await _every_route(client, session, message)
        assert [r.status_code for r in responses] == [404] * 5
        assert all(CURATED not in r.text for r in responses)
        # Their own session naming A's message: the message is not in it.
        own = await client.post("/api/v1/sessions", json={})
        responses = await _every_route(client, str(own.json()["id"]), message)
        assert [r.status_code for r in responses[:3]] == [404, 404, 404]
        assert all(CURATED not in r.text for r in responses)


@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [
        ("GET", "suggestions?assistant_message_id=" + "m" * 500, None),
        ("GET", "suggestions?assistant_message_id=a%0Ab", None),
        ("POST", "suggestions", {"assistant_message_id": "x" * 129}),
        ("POST", "suggestion-events", {"assistant_message_id": "m1a", "kind": "steal"}),
        ("POST", "suggestion-events", {"kind": "click"}),
        ("POST", "suggestion-events", {"assistant_message_id": "m1a", "kind": "click",
                                       "question_id": "q" * 65}),
        ("POST", "suggestion-events", {"assistant_message_id": "m1a", "kind": "click",
                                       "tenant_id": "victim"}),
    ],
)  # fmt: skip
async def test_hostile_input_is_refused_with_the_reason(
    api: httpx.AsyncClient, method: str, suffix: str, body: dict[str, object] | None
) -> None:
    session = (await api.post("/api/v1/sessions", json={})).json()["id"]
    resp = await api.request(method, f"/api/v1/sessions/{session}/{suffix}", json=body)
    assert resp.status_code == 422, resp.text
    assert resp.json()["detail"]


async def test_no_api_key_no_suggestions(stack: LocalStack) -> None:
    async with httpx.AsyncClient(base_url=stack.gateway_url) as anonymous:
        resp = await anonymous.get("/api/v1/sessions/s1/starters")
    assert resp.status_code == 401
