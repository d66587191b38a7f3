"""The admin API on the real stack: only the operator token opens it; API keys are made,
listed, revoked, rotated and expire; a suspended tenant's keys are refused; every change
lands in an append-only audit log."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.security.admin_fixtures import AdminStack

ADMIN_ROUTES = [
    ("GET", "/admin/v1/tenants"),
    ("POST", "/admin/v1/tenants"),
    ("GET", "/admin/v1/tenants/x"),
    ("PATCH", "/admin/v1/tenants/x"),
    ("POST", "/admin/v1/tenants/x/suspend"),
    ("POST", "/admin/v1/tenants/x/resume"),
    ("DELETE", "/admin/v1/tenants/x"),
    ("GET", "/admin/v1/tenants/x/residue"),
    ("DELETE", "/admin/v1/tenants/x/users/u"),
    ("GET", "/admin/v1/tenants/x/keys"),
    ("POST", "/admin/v1/tenants/x/keys"),
    ("POST", "/admin/v1/tenants/x/keys/k/revoke"),
    ("POST", "/admin/v1/tenants/x/keys/k/rotate"),
    ("GET", "/admin/v1/audit"),
]


async def _eventually_status(
    call: Callable[[], Awaitable[httpx.Response]], status: int, timeout_s: float = 15
) -> httpx.Response:
    """Poll until ``call`` answers ``status`` (the key cache is one second here)."""
    async with asyncio.timeout(timeout_s):
        while True:
            resp = await call()
            if resp.status_code == status:
                return resp
            await asyncio.sleep(0.2)


async def test_admin_routes_refuse_tenant_keys_and_other_tokens(admin_stack: AdminStack) -> None:
    stack = admin_stack.stack
    tenant = await admin_stack.tenant()
    tenant_key = (await admin_stack.key(tenant))["secret"]
    async with httpx.AsyncClient(base_url=stack.gateway_url, timeout=30) as anon:
        for method, url in ADMIN_ROUTES:
            missing = await anon.request(method, url, json={})
            assert missing.status_code == 401, (method, url, missing.text)
            for token in (tenant_key, stack.api_key, f"op-{secrets.token_hex(24)}"):
                headers = {"Authorization": f"Bearer {token}"}
                resp = await anon.request(method, url, json={}, headers=headers)
                assert resp.status_code == 403, (method, url, token, resp.text)
            basic = await anon.request(
                method, url, json={}, headers={"Authorization": "Basic eA=="}
            )
            assert basic.status_code == 401, (method, url, basic.text)
            # A key in X-API-Key (the public API's other header) is no operator either.
            resp = await anon.request(method, url, json={}, headers={"X-API-Key": tenant_key})
            assert resp.status_code == 401, (method, url, resp.text)
    listed = await admin_stack.admin.get("/admin/v1/tenants")
    assert listed.status_code == 200 and listed.json()["total"] >= 1


async def test_key_lifecycle_create_list_revoke_rotate_expire(admin_stack: AdminStack) -> None:
    admin = admin_stack.admin
    tenant = await admin_stack.tenant()
    created = await admin_stack.key(tenant, "alice", name="ci")
    assert created["secret"].startswith("wk_") and created["active"]
    listed = await admin.get(f"/admin/v1/tenants/{tenant}/keys")
    assert listed.status_code == 200
    assert [k["id"] for k in listed.json()] == [created["id"]]
    assert created["secret"] not in listed.text and "secret" not in listed.json()[0]

    async with admin_stack.public(created["secret"]) as alice:
        assert (await alice.get("/api/v1/sessions")).status_code == 200
        revoked = await admin.post(f"/admin/v1/tenants/{tenant}/keys/{created['id']}/revoke")
        assert revoked.status_code == 200 and not revoked.json()["active"]
        gone = await _eventually_status(lambda: alice.get("/api/v1/sessions"), 401)
        assert "revoked" in gone.json()["detail"]

    # Rotation without overlap: the new key works, the old one stops at once.
    old = await admin_stack.key(tenant, "bob")
    rotated = await admin.post(
        f"/admin/v1/tenants/{tenant}/keys/{old['id']}/rotate", json={"overlap_s": 0}
    )
    assert rotated.status_code == 201, rotated.text
    new = rotated.json()
    assert new["user_id"] == "bob" and new["secret"] != old["secret"]
    async with (
        admin_stack.public(old["secret"]) as c_old,
        admin_stack.public(new["secret"]) as c_new,
    ):
        await _eventually_status(lambda: c_old.get("/api/v1/sessions"), 401)
        assert (await c_new.get("/api/v1/sessions")).status_code == 200
    again = await admin.post(f"/admin/v1/tenants/{tenant}/keys/{old['id']}/rotate", json={})
    assert again.status_code == 409

    # Rotation with an overlap: both work meanwhile.
    third = await admin.post(
        f"/admin/v1/tenants/{tenant}/keys/{new['id']}/rotate", json={"overlap_s": 3600}
    )
    async with (
        admin_stack.public(new["secret"]) as c_prev,
        admin_stack.public(third.json()["secret"]) as c_third,
    ):
        assert (await c_prev.get("/api/v1/sessions")).status_code == 200
        assert (await c_third.get("/api/v1/sessions")).status_code == 200

    # An expiring key stops by itself.
    short = await admin_stack.key(tenant, "carol", expires_in_s=2)
    async with admin_stack.public(short["secret"]) as carol:
        expired = await _eventually_status(lambda: carol.get("/api/v1/sessions"), 401)
        assert "expired" in expired.json()["detail"]


async def test_key_requests_are_validated(admin_stack: AdminStack) -> None:
    admin = admin_stack.admin
    tenant = await admin_stack.tenant()
    bad_bodies = [
        {"user_id": ""},
        {"user_id": "x" * 129},
        {"user_id": "u", "expires_in_s": 0},
        {"user_id": "u", "knowledge_base_ids": "kb"},
        {"user_id": "u/../v"},
    ]
    for body in bad_bodies:
        resp = await admin.post(f"/admin/v1/tenants/{tenant}/keys", json=body)
        assert resp.status_code == 422, (body, resp.text)
    missing = await admin.post("/admin/v1/tenants/nope-nope/keys", json={"user_id": "u"})
    assert missing.status_code == 404
    other = await admin_stack.tenant()
    key = await admin_stack.key(other)
    # A key is addressed under its own tenant only.
    wrong = await admin.post(f"/admin/v1/tenants/{tenant}/keys/{key['id']}/revoke")
    assert wrong.status_code == 404
    for tenant_id in ("a:b", "a*", "../x", "a b", "x" * 129):
        resp = await admin.post("/admin/v1/tenants", json={"id": tenant_id})
        assert resp.status_code == 422, (tenant_id, resp.text)
    dup = await admin.post("/admin/v1/tenants", json={"id": tenant})
    assert dup.status_code == 409
    for params in ({"limit": 0}, {"limit": 1001}, {"outcome": "maybe"}, {"before_id": "x"},
                   {"since": "yesterday"}):  # fmt: skip
        resp = await admin.get("/admin/v1/audit", params=params)
        assert resp.status_code == 422, (params, resp.text)
    for body in ({"settings": {"retention": {"messages_days": -1}}},
                 {"settings": {"unknown": 1}}, {"settings": {"retention": {"forever": 1}}},
                 {"name": "x" * 201}):  # fmt: skip
        resp = await admin.patch(f"/admin/v1/tenants/{tenant}", json=body)
        assert resp.status_code == 422, (body, resp.text)
    for params in ({"status": "gone"}, {"limit": 501}, {"offset": -1}):
        assert (await admin.get("/admin/v1/tenants", params=params)).status_code == 422
    rotate = await admin.post(
        f"/admin/v1/tenants/{other}/keys/{key['id']}/rotate", json={"overlap_s": 8 * 86400}
    )
    assert rotate.status_code == 422


async def test_suspended_tenant_is_refused_everywhere_until_resumed(
    admin_stack: AdminStack,
) -> None:
    admin = admin_stack.admin
    tenant = await admin_stack.tenant()
    key = await admin_stack.key(tenant)
    async with admin_stack.public(key["secret"]) as client:
        session = await client.post("/api/v1/sessions", json={"title": "before"})
        assert session.status_code == 201
        suspended = await admin.post(f"/admin/v1/tenants/{tenant}/suspend")
        assert suspended.status_code == 200 and suspended.json()["status"] == "suspended"
        refused = await _eventually_status(lambda: client.get("/api/v1/sessions"), 403)
        assert refused.json()["detail"] == "tenant suspended"
        sid = session.json()["id"]
        for method, url in [
            ("GET", f"/api/v1/sessions/{sid}"),
            ("POST", f"/api/v1/agent-chat/{sid}"),
            ("GET", "/api/v1/knowledge-bases"),
            ("GET", "/api/v1/agents"),
        ]:
            resp = await client.request(method, url, json={"query": "hi"})
            assert resp.status_code == 403, (method, url, resp.text)
        no_key = await admin.post(f"/admin/v1/tenants/{tenant}/keys", json={"user_id": "u2"})
        assert no_key.status_code == 409
        resumed = await admin.post(f"/admin/v1/tenants/{tenant}/resume")
        assert resumed.json()["status"] == "active"
        await _eventually_status(lambda: client.get("/api/v1/sessions"), 200)


async def test_audit_log_records_actions_and_cannot_be_changed(
    admin_stack: AdminStack, engine: AsyncEngine
) -> None:
    admin = admin_stack.admin
    tenant = await admin_stack.tenant()
    key = await admin_stack.key(tenant)
    await admin.post(f"/admin/v1/tenants/{tenant}/keys/{key['id']}/revoke")
    dup = await admin.post("/admin/v1/tenants", json={"id": tenant})  # refused: exists
    assert dup.status_code == 409
    entries = (await admin.get("/admin/v1/audit", params={"target_id": tenant})).json()
    assert [(e["action"], e["outcome"]) for e in entries] == [
        ("tenant.create", "refused"),
        ("key.create", "ok"),
        ("tenant.create", "ok"),
    ]
    assert all(e["actor"].startswith("operator:") for e in entries)
    assert key["secret"] not in str(entries)
    page = (await admin.get("/admin/v1/audit", params={"limit": 1, "target_id": tenant})).json()
    rest = await admin.get(
        "/admin/v1/audit", params={"target_id": tenant, "before_id": page[0]["id"]}
    )
    assert [e["id"] for e in page + rest.json()] == [e["id"] for e in entries]
    refused = await admin.get(
        "/admin/v1/audit",
        params={"outcome": "refused", "action": "tenant.create", "target_id": tenant},
    )
    assert len(refused.json()) == 1

    for statement in (
        "UPDATE admin_audit SET outcome = 'ok' WHERE target_id = :t",
        "DELETE FROM admin_audit WHERE target_id = :t",
        "TRUNCATE admin_audit",
    ):
        with pytest.raises(DBAPIError, match="append-only"):
            async with engine.begin() as conn:
                await conn.execute(text(statement), {"t": tenant})
    after = (await admin.get("/admin/v1/audit", params={"target_id": tenant})).json()
    assert after == entries
