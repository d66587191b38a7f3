"""Internal routes where leaving a filter out used to widen the scope, attacked with a
request credential of one user as if it had leaked (docs/security.md "Credentials stay
inside", the route table). The credential is the one the gateway mints for that user's
key; the attacker calls the service's port directly, without the gateway's checks."""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

import httpx
from weft_testkit import LocalStack

from tests.stack_fixtures import ApiKeys, KeyedClient


async def _agent(client: KeyedClient, **fields: Any) -> str:
    body = {"name": f"w-{secrets.token_hex(3)}", "allowed_tools": [], **fields}
    made = await client.http.post("/api/v1/agents", json=body)
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


async def _kb(client: KeyedClient) -> str:
    made = await client.http.post("/api/v1/knowledge-bases", json={"name": secrets.token_hex(3)})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def _as(stack: LocalStack, user: str, *, kbs: list[str] | None = None) -> dict[str, str]:
    """What the gateway gives a request of ``user``'s key (limited to ``kbs``)."""
    token = stack.credentials.gateway.request(
        tenant_id=stack.tenant, user_id=user, knowledge_base_ids=kbs,
        audience=["memory", "agent-config", "suggestions", "sandbox"], ttl_s=300,
    )  # fmt: skip
    return {"Authorization": f"Bearer {token}"}


async def test_a_kb_restricted_credential_cannot_widen_itself_at_agent_config(
    stack: LocalStack, api_keys: ApiKeys
) -> None:
    """/internal/resolve without ``key_knowledge_base_ids`` and agent writes naming another
    KB: the key's list comes from the credential, not from what the request leaves out."""
    admin = await api_keys.client(user=f"admin-{secrets.token_hex(3)}")
    mine, theirs = await _kb(admin), await _kb(admin)
    secret_agent = await _agent(admin, kb_selection_mode="selected", knowledge_base_ids=[theirs],
                                allowed_tools=["knowledge_search"])  # fmt: skip
    user = f"kbuser-{secrets.token_hex(3)}"
    restricted = _as(stack, user, kbs=[mine])
    resolve = {"tenant_id": stack.tenant, "agent_id": secret_agent}
    async with httpx.AsyncClient(base_url=stack.url("agent_config"), timeout=30) as config:
        got = await config.post("/internal/resolve", json=resolve, headers=restricted)
        assert got.status_code == 403, got.text
        widened = await config.post(
            "/internal/resolve", json={**resolve, "key_knowledge_base_ids": [mine, theirs]},
            headers=restricted,
        )  # fmt: skip
        assert widened.status_code == 403, widened.text
        # The same call with an unrestricted key's credential is served: the agent is fine.
        assert (
            await config.post("/internal/resolve", json=resolve, headers=_as(stack, user))
        ).status_code == 200
        params = {"tenant_id": stack.tenant, "user_id": user}
        body = {"name": "sneaky", "kb_selection_mode": "selected", "knowledge_base_ids": [theirs],
                "allowed_tools": ["knowledge_search"]}  # fmt: skip
        created = await config.post(
            "/internal/agents", params=params, json=body, headers=restricted
        )
        assert created.status_code == 404 and theirs in created.text, created.text
        replaced = await config.put(
            f"/internal/agents/{secret_agent}", params=params, json=body, headers=restricted
        )
        assert replaced.status_code == 404, replaced.text
        own = {**body, "knowledge_base_ids": [mine]}
        ok = await config.post("/internal/agents", params=params, json=own, headers=restricted)
        assert ok.status_code == 201, ok.text


async def test_starters_and_starter_events_of_another_users_session_are_404(
    stack: LocalStack, api_keys: ApiKeys
) -> None:
    ann_key = await api_keys.client(user=f"ann-{secrets.token_hex(3)}")
    bob_key = await api_keys.client(user=f"bob-{secrets.token_hex(3)}")
    agent = await _agent(ann_key)
    sessions = {}
    for name, client in (("ann", ann_key), ("bob", bob_key)):
        made = await client.http.post("/api/v1/sessions", json={"agent_id": agent})
        sessions[name] = (made.json()["user_id"], made.json()["id"])
    ann, ann_sid = sessions["ann"]
    _, bob_sid = sessions["bob"]
    as_ann = _as(stack, ann)
    query = {"tenant_id": stack.tenant, "user_id": ann, "agent_id": agent}
    event = {"tenant_id": stack.tenant, "user_id": ann, "assistant_message_id": f"agent:{agent}",
             "placement": "starter", "kind": "click"}  # fmt: skip
    async with httpx.AsyncClient(base_url=stack.url("suggestions"), timeout=30) as suggestions:
        for sid, mine in ((bob_sid, False), (ann_sid, True)):
            got = await suggestions.get(
                f"/internal/sessions/{sid}/starters", params=query, headers=as_ann
            )
            assert (got.status_code != 404) == mine, (sid, got.status_code, got.text)
            posted = await suggestions.post(
                f"/internal/sessions/{sid}/suggestion-events", json=event, headers=as_ann
            )
            assert (posted.status_code == 201) == mine, (sid, posted.text)
            if not mine:
                assert posted.status_code == 404, posted.text


async def test_another_users_memory_extraction_is_404(stack: LocalStack, api_keys: ApiKeys) -> None:
    """``GET /internal/memories/extractions/{request_id}`` names no user: it is the
    credential's user's turn or 404."""
    bob_key = await api_keys.client(user=f"bob-{secrets.token_hex(3)}")
    agent = await _agent(bob_key, memory_enabled=True)
    made = await bob_key.http.post("/api/v1/sessions", json={"agent_id": agent})
    bob, sid = made.json()["user_id"], made.json()["id"]
    async with bob_key.http.stream(
        "POST", f"/api/v1/agent-chat/{sid}", json={"query": "I like tea"}, timeout=120
    ) as resp:
        request_id = resp.headers["x-request-id"]
        async for line in resp.aiter_lines():
            if line.startswith("event: complete"):
                break
    path = f"/internal/memories/extractions/{request_id}"
    query = {"tenant_id": stack.tenant}
    async with httpx.AsyncClient(base_url=stack.url("memory"), timeout=30) as memory:
        deadline = time.monotonic() + 60
        own = await memory.get(path, params=query, headers=_as(stack, bob))
        while own.status_code == 404:  # memory has not recorded the turn's end yet
            assert time.monotonic() < deadline, own.text
            await asyncio.sleep(0.2)
            own = await memory.get(path, params=query, headers=_as(stack, bob))
        assert own.status_code == 200, own.text
        other = await memory.get(path, params=query, headers=_as(stack, f"eve-{bob}"))
        assert other.status_code == 404, other.text
