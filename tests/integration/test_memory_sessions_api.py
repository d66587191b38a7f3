"""Internal session routes of memory on the real PostgreSQL: list, patch, soft delete, clear,
cursor pagination; another tenant's session is 404 (invariant 5), and so is another user's
of the same tenant."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from weft_memory.api import session_router
from weft_memory.history_api import history_router
from weft_storage.memory.models import Message
from weft_testkit.credentials import trusted

from tests.workspaces_kit import sandbox_workspaces


@pytest.fixture
async def client(engine: AsyncEngine) -> AsyncIterator[httpx.AsyncClient]:
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    app = FastAPI()
    app.include_router(session_router(sessions, sandbox_workspaces(sessions)))
    app.include_router(history_router(sessions))
    transport = trusted(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://memory") as c:
        c.sessions = sessions  # type: ignore[attr-defined]
        yield c


def _tenant() -> str:
    return f"t-{secrets.token_hex(4)}"


def _as(tenant: str, user: str = "u1") -> dict[str, str]:
    """Query parameters naming the caller of a route by session id."""
    return {"tenant_id": tenant, "user_id": user}


async def _session(c: httpx.AsyncClient, tenant: str, user: str = "u1", title: str = "") -> str:
    resp = await c.post(
        "/internal/sessions", json={"tenant_id": tenant, "user_id": user, "title": title}
    )
    assert resp.status_code == 201
    return str(resp.json()["id"])


async def test_list_sessions_scoped_by_tenant_and_user(client: httpx.AsyncClient) -> None:
    tenant, other = _tenant(), _tenant()
    a = await _session(client, tenant, "u1", "a")
    b = await _session(client, tenant, "u1", "b")
    await _session(client, tenant, "u2", "c")
    await _session(client, other, "u1", "d")
    resp = await client.get("/internal/sessions", params={"tenant_id": tenant, "user_id": "u1"})
    assert resp.status_code == 200
    assert {s["id"] for s in resp.json()} == {a, b}
    everyone = await client.get("/internal/sessions", params={"tenant_id": tenant})
    assert len(everyone.json()) == 3
    page = await client.get(
        "/internal/sessions", params={"tenant_id": tenant, "limit": 2, "offset": 2}
    )
    assert len(page.json()) == 1


async def test_patch_session_and_other_tenant_is_404(client: httpx.AsyncClient) -> None:
    tenant = _tenant()
    sid = await _session(client, tenant, title="old")
    resp = await client.patch(
        f"/internal/sessions/{sid}", params=_as(tenant), json={"title": "new"}
    )
    assert resp.status_code == 200
    assert resp.json()["title"] == "new" and resp.json()["agent_id"] is None
    resp = await client.patch(
        f"/internal/sessions/{sid}", params=_as(tenant), json={"agent_id": "ag1"}
    )
    assert resp.json()["title"] == "new" and resp.json()["agent_id"] == "ag1"
    for method in ("PATCH", "DELETE"):
        foreign = await client.request(
            method, f"/internal/sessions/{sid}", params=_as(_tenant()), json={}
        )
        assert foreign.status_code == 404
    foreign = await client.delete(f"/internal/sessions/{sid}/messages", params=_as(_tenant()))
    assert foreign.status_code == 404
    bad = await client.patch(
        f"/internal/sessions/{sid}", params=_as(tenant), json={"title": "x" * 501}
    )
    assert bad.status_code == 422


async def test_soft_delete_hides_the_session(client: httpx.AsyncClient) -> None:
    tenant = _tenant()
    sid = await _session(client, tenant)
    resp = await client.delete(f"/internal/sessions/{sid}", params=_as(tenant))
    assert resp.status_code == 204
    gone = await client.get(f"/internal/sessions/{sid}", params=_as(tenant))
    assert gone.status_code == 404
    listed = await client.get("/internal/sessions", params={"tenant_id": tenant})
    assert listed.json() == []
    again = await client.delete(f"/internal/sessions/{sid}", params=_as(tenant))
    assert again.status_code == 404


async def _add_messages(client: httpx.AsyncClient, tenant: str, sid: str, n: int) -> list[str]:
    sessions = client.sessions  # type: ignore[attr-defined]
    base = datetime(2026, 1, 1, tzinfo=UTC)
    ids = []
    async with sessions.begin() as s:
        for i in range(n):
            mid = f"m{secrets.token_hex(6)}{i:03d}"
            ids.append(mid)
            s.add(
                Message(
                    id=mid, tenant_id=tenant, session_id=sid, request_id=f"r-{mid}",
                    role="user", content=f"msg {i}", is_completed=True, status="completed",
                    created_at=base + timedelta(seconds=i),
                )
            )  # fmt: skip
    return ids


async def test_messages_cursor_pagination(client: httpx.AsyncClient) -> None:
    tenant = _tenant()
    sid = await _session(client, tenant)
    ids = await _add_messages(client, tenant, sid, 7)
    url = f"/internal/sessions/{sid}/messages"
    newest = await client.get(url, params=_as(tenant) | {"limit": 3})
    assert [m["id"] for m in newest.json()] == ids[4:]
    older = await client.get(url, params=_as(tenant) | {"limit": 3, "before": ids[4]})
    assert [m["id"] for m in older.json()] == ids[1:4]
    oldest = await client.get(url, params=_as(tenant) | {"limit": 3, "before": ids[1]})
    assert [m["id"] for m in oldest.json()] == ids[:1]
    unknown = await client.get(url, params=_as(tenant) | {"before": "nope"})
    assert unknown.status_code == 404
    foreign = await client.get(url, params=_as(_tenant()))
    assert foreign.status_code == 404


async def test_clear_messages(client: httpx.AsyncClient) -> None:
    tenant = _tenant()
    sid = await _session(client, tenant)
    await _add_messages(client, tenant, sid, 3)
    resp = await client.delete(f"/internal/sessions/{sid}/messages", params=_as(tenant))
    assert resp.status_code == 204
    left = await client.get(f"/internal/sessions/{sid}/messages", params=_as(tenant))
    assert left.json() == []
    still = await client.get(f"/internal/sessions/{sid}", params=_as(tenant))
    assert still.status_code == 200


async def test_another_users_session_is_404_on_every_route(client: httpx.AsyncClient) -> None:
    """A session belongs to its user: every route by session id answers another user of the
    same tenant the 404 of a missing session, changes nothing, and the user is required."""
    tenant = _tenant()
    sid = await _session(client, tenant, "u1", "mine")
    ids = await _add_messages(client, tenant, sid, 2)
    base = f"/internal/sessions/{sid}"
    attempts = [
        ("GET", base, None, {}),
        ("PATCH", base, {"title": "stolen"}, {}),
        ("DELETE", base, None, {}),
        ("GET", f"{base}/messages", None, {}),
        ("DELETE", f"{base}/messages", None, {}),
        ("DELETE", f"{base}/messages", None, {"from": ids[0]}),
        ("DELETE", f"{base}/messages/{ids[1]}", None, {}),
    ]
    for method, url, body, extra in attempts:
        other = await client.request(method, url, params=_as(tenant, "u2") | extra, json=body)
        assert other.status_code == 404, (method, url, other.text)
        assert other.json()["detail"] == f"session {sid!r} not found"
        anonymous = await client.request(method, url, params={"tenant_id": tenant}, json=body)
        assert anonymous.status_code == 422, (method, url, anonymous.text)
    mine = await client.get(base, params=_as(tenant))
    assert mine.status_code == 200 and mine.json()["title"] == "mine"
    kept = await client.get(f"{base}/messages", params=_as(tenant))
    assert [m["id"] for m in kept.json()] == ids
