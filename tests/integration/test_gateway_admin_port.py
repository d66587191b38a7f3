"""The gateway started with ``WEFT_ADMIN_PORT`` serves the admin API on that port alone, and
its public API on the public port alone, from one process (weft_gateway.admin_port); on
SIGTERM with ``WEFT_DRAIN_DELAY_S`` its ``/readyz`` turns 503 ``draining`` on both ports
while it goes on serving, and a second signal ends it (weft_platform.app.DrainingServer)."""

from __future__ import annotations

import asyncio
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from weft_gateway.auth import hash_key
from weft_gateway.key_registry import DEV_KEY_NAME, KeyRegistry
from weft_storage.gateway.keys import ApiKey

from tests.admin_port_gateway import SplitGateway, split_gateway

pytestmark = pytest.mark.infra


@pytest.fixture
def gateway(migrated: str, tmp_path: Path) -> Iterator[SplitGateway]:
    with split_gateway(migrated, tmp_path, WEFT_DRAIN_DELAY_S="120") as running:
        yield running


async def test_admin_routes_answer_only_on_the_admin_port(gateway: SplitGateway) -> None:
    tenant = f"t-{secrets.token_hex(5)}"
    body = {"id": tenant, "name": tenant}
    async with httpx.AsyncClient(headers=gateway.operator, timeout=30) as http:
        created = await http.post(f"{gateway.admin_url}/admin/v1/tenants", json=body)
        assert created.status_code == 201, created.text
        listed = await http.get(f"{gateway.admin_url}/admin/v1/tenants/{tenant}")
        assert listed.status_code == 200 and listed.json()["id"] == tenant

        public = await http.get(f"{gateway.public_url}/admin/v1/tenants/{tenant}")
        assert public.status_code == 404
        # The public API is on the public port (401: it wants a tenant key), not the admin one.
        assert (await http.get(f"{gateway.public_url}/api/v1/sessions")).status_code == 401
        assert (await http.get(f"{gateway.admin_url}/api/v1/sessions")).status_code == 404
        for url in (gateway.public_url, gateway.admin_url):
            assert (await http.get(f"{url}/readyz")).status_code == 200


async def _until_draining(url: str) -> httpx.Response:
    deadline = time.monotonic() + 60
    async with httpx.AsyncClient(timeout=5) as http:
        while True:
            resp = await http.get(f"{url}/readyz")
            if resp.json()["status"] == "draining":
                return resp
            assert time.monotonic() < deadline, resp.text
            await asyncio.sleep(0.2)


async def test_sigterm_turns_readiness_to_draining_while_requests_are_served(
    gateway: SplitGateway,
) -> None:
    gateway.process.send_signal(signal.SIGTERM)
    resp = await _until_draining(gateway.public_url)
    assert resp.status_code == 503
    assert (await _until_draining(gateway.admin_url)).status_code == 503
    async with httpx.AsyncClient(headers=gateway.operator, timeout=30) as http:
        served = await http.get(f"{gateway.admin_url}/admin/v1/tenants")
        assert served.status_code == 200, served.text
        assert (await http.get(f"{gateway.public_url}/healthz")).status_code == 200
    gateway.process.send_signal(signal.SIGTERM)  # the second signal: stop now
    gateway.process.wait(timeout=60)


async def test_a_test_gateway_leaves_the_other_stacks_development_keys_alone(
    migrated: str, tmp_path: Path
) -> None:
    """Every stack of a test run shares one database. A gateway started without a
    development key revokes every development key there (a production start keeps none),
    which took the shared stacks' keys away mid-run (96 failures, every request a 401):
    the split gateway starts with a key of its own."""

    engine = create_async_engine(migrated)
    try:
        registry = KeyRegistry(async_sessionmaker(engine))
        other = f"dev-{secrets.token_hex(16)}"  # another stack's development key
        await registry.apply_dev_key(f"t-{secrets.token_hex(4)}", "dev", other)
        with split_gateway(migrated, tmp_path):
            pass
        async with engine.connect() as conn:
            revoked = await conn.scalar(
                select(ApiKey.revoked_at).where(
                    ApiKey.name == DEV_KEY_NAME, ApiKey.key_hash == hash_key(other)
                )
            )
        assert revoked is None
    finally:
        await engine.dispose()
