"""The owners' tenant-purge routes (``DELETE /internal/tenants/{tenant_id}/data`` and the
rest, ``weft_storage.owner_purge``), attacked on the running stack as a network neighbour
would: without a credential, with a forged one, with another service's or the operator's,
with a tenant's API key or request credential, with the gateway's for another scope, and
with path-traversal-ish tenant ids. Every attempt is refused with a 4xx (never a 500) and
the victim tenant's rows stay."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from weft_platform.credentials import load_signer, new_key_pair

from tests.security.admin_fixtures import AdminStack

OWNERS = {"memory": "memory", "agent_config": "agent-config", "knowledge": "knowledge",
          "sandbox": "sandbox",
          "suggestions": "suggestions"}  # fmt: skip
"""Stack name -> service (audience) of every owner the gateway asks to purge."""
TRAVERSAL = ["..%2F..%2Fetc", "%2e%2e", "%2E%2E", ".%2E", "t%00x", "*", "t'--", "a" * 300,
             "%252e%252e"]  # fmt: skip
"""Sent as written (percent-encoded: a client resolves a literal ``..`` segment itself).
An encoded ``/`` is decoded before routing, so ``t%2Fusers%2Fu`` is simply user ``u`` of
tenant ``t``: the gateway never names such an id (the admin API refuses ``/``)."""


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _victim(admin_stack: AdminStack, engine: AsyncEngine) -> tuple[str, str, dict[str, int]]:
    """A tenant with a key and a session: its id, the key, its rows in two owners' tables."""
    tenant = await admin_stack.tenant()
    key = (await admin_stack.key(tenant, "v"))["secret"]
    async with admin_stack.public(key) as api:
        made = await api.post("/api/v1/sessions", json={"title": "s"})
        assert made.status_code == 201, made.text
    return tenant, key, await _rows(engine, tenant)


async def _rows(engine: AsyncEngine, tenant: str) -> dict[str, int]:
    async with engine.connect() as conn:
        return {
            t: (
                await conn.execute(
                    text(f"SELECT count(*) FROM {t} WHERE tenant_id = :t"), {"t": tenant}
                )
            ).scalar_one()
            for t in ("sessions", "api_keys")
        }


async def test_the_purge_routes_refuse_every_caller_but_the_gateway(
    admin_stack: AdminStack, engine: AsyncEngine, tmp_path: Path
) -> None:
    stack = admin_stack.stack
    tenant, api_key, before = await _victim(admin_stack, engine)
    keys = stack.credentials
    memory_signer = load_signer(stack.credentials_dir, "memory")
    new_key_pair(tmp_path, "gateway", "dev1")  # the gateway's name and key id, not its key
    forger = load_signer(tmp_path, "gateway")
    wrong = []
    for name, service in OWNERS.items():
        scope = f"{service}:tenant-data"
        attempts = {
            "none": ({}, {401}),
            "malformed": (_bearer("not.a.jwt"), {401}),
            "forged gateway key": (_bearer(forger.service(service, [scope])), {401}),
            "another service": (_bearer(memory_signer.service(service, [scope])), {403}),
            "the operator": (_bearer(keys.operator.service(service, [scope])), {403}),
            "the gateway, other scope": (
                _bearer(keys.gateway.service(service, ["memory:usage.read"])),
                {403},
            ),
            "the gateway, other audience": (
                _bearer(keys.gateway.service("tool-exec", [scope])),
                {401},
            ),
            "a tenant's API key": (_bearer(api_key), {401}),
            "a tenant's request credential": (_bearer(keys.request(tenant, "v")), {401}),
        }
        async with httpx.AsyncClient(base_url=stack.url(name), timeout=30) as client:
            for case, (headers, expected) in attempts.items():
                for method, path in (
                    ("DELETE", f"/internal/tenants/{tenant}/data"),
                    ("GET", f"/internal/tenants/{tenant}/data"),
                    ("DELETE", f"/internal/tenants/{tenant}/users/v/data"),
                ):
                    resp = await client.request(method, path, headers=headers)
                    if resp.status_code not in expected:
                        wrong.append(f"{name} {case} {method} {path}: {resp.status_code}")
    assert not wrong, wrong
    assert await _rows(engine, tenant) == before


@pytest.mark.parametrize("name", list(OWNERS))
async def test_traversal_ish_tenant_ids_are_refused_never_a_500(
    admin_stack: AdminStack, engine: AsyncEngine, name: str
) -> None:
    stack = admin_stack.stack
    tenant, _, before = await _victim(admin_stack, engine)
    service = OWNERS[name]
    headers = _bearer(stack.credentials.gateway.service(service, [f"{service}:tenant-data"]))
    async with httpx.AsyncClient(base_url=stack.url(name), timeout=30) as client:
        for bad in [*TRAVERSAL, f"{tenant}%2F..", f"{tenant}%2F..%2F{tenant}"]:
            for method, path in (
                ("DELETE", f"/internal/tenants/{bad}/data"),
                ("GET", f"/internal/tenants/{bad}/data"),
                ("DELETE", f"/internal/tenants/{tenant}/users/{bad}/data"),
            ):
                resp = await client.request(method, path, headers=headers)
                assert 400 <= resp.status_code < 500, (path, resp.status_code, resp.text)
        bodies = [{"session_ids": "x"}, {"session_ids": [1, None]}, {"session_ids": ["a" * 500]}]
        for body in bodies:
            resp = await client.request(
                "DELETE", f"/internal/tenants/{tenant}/users/v/data", json=body, headers=headers
            )
            assert resp.status_code == 422, resp.text
    assert await _rows(engine, tenant) == before
