"""Another tenant's (or user's) suggestions through the suggestions service's internal API
(SPEC Q-05, ARCHITECTURE invariant 5): a credential for tenant B never reads, regenerates
or records events on tenant A's follow-ups. Naming A with B's credential is refused (403);
asking for A's message as B finds nothing (404), as a missing message. The app runs in
process on the real PostgreSQL; its sets are in curated mode (no model needed)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from weft_contracts import (
    CompleteData,
    CompleteEvent,
    TurnStartedData,
    TurnStartedEvent,
    TurnStatus,
    assistant_message_id,
)
from weft_suggestions.app import SuggestionsSettings, create_app
from weft_suggestions.config import FollowUpConfig
from weft_suggestions.worker import SuggestionWorker
from weft_testkit.credentials import DevCredentials

CONFIG = FollowUpConfig(
    enabled=True, mode="curated", curated=("Show me the plans",), allow_regenerate=True
)


@dataclass
class Seeded:
    """Tenant A's turn with its ready follow-ups, and the client of the app."""

    client: httpx.AsyncClient
    tenant: str
    other_tenant: str
    session: str
    message: str


@pytest.fixture
async def seeded(migrated: str) -> AsyncIterator[Seeded]:
    app = create_app(SuggestionsSettings(follow_ups=CONFIG))
    worker: SuggestionWorker = app.state.worker
    tenant, other = "t-sugg-a-" + secrets.token_hex(3), "t-sugg-b-" + secrets.token_hex(3)
    session, request = "ses-" + secrets.token_hex(3), "req-" + secrets.token_hex(3)
    started = TurnStartedEvent(
        tenant_id=tenant,
        session_id=session,
        request_id=request,
        data=TurnStartedData(query="What does it cost?", user_id="u1", agent_id="a1"),
    )
    complete = CompleteEvent(
        tenant_id=tenant,
        session_id=session,
        request_id=request,
        data=CompleteData(status=TurnStatus.COMPLETED, final_answer="20 euros."),
    )
    await worker.on_events([started, complete])
    await worker.idle()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://suggestions") as client:
        yield Seeded(client, tenant, other, session, assistant_message_id(started.id))
    await app.state.runtime.db.dispose()
    await app.state.runtime.redis.aclose()


def _auth(keys: DevCredentials, tenant: str, user: str = "u1") -> dict[str, str]:
    token = keys.gateway.request(tenant_id=tenant, user_id=user, audience=["suggestions"], ttl_s=60)
    return {"Authorization": f"Bearer {token}"}


async def _calls(
    s: Seeded, headers: dict[str, str], tenant: str, user: str = "u1"
) -> list[httpx.Response]:
    path = f"/internal/sessions/{s.session}"
    ids = {"tenant_id": tenant, "user_id": user, "assistant_message_id": s.message}
    return [
        await s.client.get(f"{path}/suggestions", params=ids, headers=headers),
        await s.client.post(f"{path}/suggestions", json=ids, headers=headers),
        await s.client.post(
            f"{path}/suggestion-events", json={**ids, "kind": "click"}, headers=headers
        ),
    ]


async def test_the_owner_reads_its_follow_ups(seeded: Seeded) -> None:
    keys = DevCredentials.load()
    resp = await seeded.client.get(
        f"/internal/sessions/{seeded.session}/suggestions",
        params={
            "tenant_id": seeded.tenant,
            "user_id": "u1",
            "assistant_message_id": seeded.message,
        },
        headers=_auth(keys, seeded.tenant),
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["state"] == "ready"
    assert [q["text"] for q in body["questions"]] == ["Show me the plans"]


async def test_another_tenant_naming_the_owner_is_refused(seeded: Seeded) -> None:
    keys = DevCredentials.load()
    responses = await _calls(seeded, _auth(keys, seeded.other_tenant), seeded.tenant)
    assert [r.status_code for r in responses] == [403, 403, 403]


async def test_another_tenant_asking_as_itself_finds_nothing(seeded: Seeded) -> None:
    keys = DevCredentials.load()
    other = seeded.other_tenant
    responses = await _calls(seeded, _auth(keys, other), other)
    assert [r.status_code for r in responses] == [404, 404, 404]
    assert all("Show me the plans" not in r.text for r in responses)


async def test_another_user_of_the_same_tenant_finds_nothing(seeded: Seeded) -> None:
    keys = DevCredentials.load()
    responses = await _calls(seeded, _auth(keys, seeded.tenant, "u2"), seeded.tenant, "u2")
    assert [r.status_code for r in responses] == [404, 404, 404]
