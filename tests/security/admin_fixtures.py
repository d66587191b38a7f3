"""The stack of the admin suites: a gateway with an operator token, a one-second key
cache and a one-second maintenance period, on real Kafka, PostgreSQL and Redis."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from weft_testkit import LocalStack, StackConfig

from tests.stack_fixtures import per_worker, stack_log_dir, weft_home

OPERATOR_TOKEN = f"op-{secrets.token_hex(24)}"
AUTH_CACHE_S = 1.0


@dataclass(frozen=True)
class AdminStack:
    """The running stack and an operator's client of its admin API."""

    stack: LocalStack
    admin: httpx.AsyncClient

    def public(self, token: str) -> httpx.AsyncClient:
        """A public-API client presenting ``token`` (an API key or an end-user JWT)."""
        return httpx.AsyncClient(
            base_url=self.stack.gateway_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        )

    async def tenant(self, **settings: Any) -> str:
        """A new tenant (random id) with ``settings``; its id."""
        tenant_id = f"t-{secrets.token_hex(6)}"
        body = {"id": tenant_id, "name": tenant_id, "settings": settings}
        resp = await self.admin.post("/admin/v1/tenants", json=body)
        assert resp.status_code == 201, resp.text
        return tenant_id

    async def key(self, tenant_id: str, user_id: str = "u1", **extra: Any) -> dict[str, Any]:
        """A new key of ``tenant_id`` (the answer, with its ``secret``)."""
        resp = await self.admin.post(
            f"/admin/v1/tenants/{tenant_id}/keys", json={"user_id": user_id, **extra}
        )
        assert resp.status_code == 201, resp.text
        created: dict[str, Any] = resp.json()
        return created


def sandbox_root() -> Path:
    """The admin stack's sandbox workspaces (one directory per session)."""
    return weft_home() / "sandbox" / per_worker("admin-suite")


@pytest.fixture(scope="session")
def admin_stack_process(infra: dict[str, str]) -> Iterator[LocalStack]:
    """Every service, with the admin settings above on the gateway."""
    extra = {
        "WEFT_ADMIN_TOKEN_SHA256": hashlib.sha256(OPERATOR_TOKEN.encode()).hexdigest(),
        "WEFT_AUTH_CACHE_S": str(AUTH_CACHE_S),
        "WEFT_MAINTENANCE_INTERVAL_S": "1",
        # Deletions watched for late writes for 2 minutes, not a day: every run (each
        # second here) counts the residue of each watched tenant.
        "WEFT_PURGE_WATCH_S": "120",
        "WEFT_END_USER_ISSUER_CACHE_S": "1",
        "WEFT_BUDGET_CACHE_S": "1",
        # Where the deletion test looks for a purged session's workspace on the replica.
        "WEFT_SANDBOX_ROOT": str(sandbox_root()),
        "WEFT_SANDBOX_REAP_INTERVAL_S": "1",
        # An unknown or someone else's prompt is waited for (it may not be recorded yet)
        # before its 404: 1 s here, not 5, as the attack tests send many of them.
        "WEFT_APPROVAL_LOOKUP_WAIT_S": "1",
        "WEFT_DECISION_WAIT_S": "1",
    }
    config = StackConfig(log_dir=stack_log_dir("admin"), extra_env=extra)
    with LocalStack(config) as running:
        yield running


@pytest.fixture
async def admin_stack(admin_stack_process: LocalStack) -> AsyncIterator[AdminStack]:
    """The admin stack with an operator client, closed after the test."""
    headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    async with httpx.AsyncClient(
        base_url=admin_stack_process.gateway_url, headers=headers, timeout=60
    ) as admin:
        yield AdminStack(admin_stack_process, admin)
