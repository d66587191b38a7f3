"""The sandbox's checkpoint routes (``POST /internal/checkpoints/fork`` and ``/rollback``),
through which memory's fork and rollback move the workspace (docs/sandbox.md "Fork and
rollback"), attacked on the stack's sandbox port directly, as a caller who reached the
internal network would: no credential, a user's request credential (even for the right
tenant), a service credential of another issuer or scope, hostile ids and bodies. Every
refusal is a 4xx with its reason, never a 500; memory's own credential works, and only on
the tenant it names."""

from __future__ import annotations

import secrets
from typing import Any

import httpx
import pytest
from weft_platform.credentials import load_signer
from weft_testkit import LocalStack

pytestmark = pytest.mark.kafka

FORK = "/internal/checkpoints/fork"
ROLLBACK = "/internal/checkpoints/rollback"
SCOPE = "sandbox:checkpoints"


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _memory(stack: LocalStack) -> dict[str, str]:
    """memory's own service credential, as its fork and rollback present it."""
    return _bearer(load_signer(stack.credentials_dir, "memory").service("sandbox", [SCOPE]))


def _fork(tenant: str, **over: Any) -> dict[str, Any]:
    return {
        "tenant_id": tenant, "source_session_id": f"ses_{secrets.token_hex(4)}",
        "target_session_id": f"ses_{secrets.token_hex(4)}", "turns": {"req_a": "req_b"},
        **over,
    }  # fmt: skip


async def _post(stack: LocalStack, path: str, body: Any, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=stack.url("sandbox"), timeout=30) as raw:
        return await raw.post(path, json=body, headers=headers)


@pytest.mark.parametrize("path", [FORK, ROLLBACK])
@pytest.mark.parametrize("who", ["nobody", "own-user", "suggestions", "wrong-scope"])
async def test_only_memory_s_service_credential_opens_them(
    stack: LocalStack, path: str, who: str
) -> None:
    body = (
        _fork(stack.tenant) if path == FORK
        else {"tenant_id": stack.tenant, "session_id": "ses_x", "remaining": []}
    )  # fmt: skip
    headers = {
        "nobody": {},
        "own-user": stack.credentials.headers(stack.tenant, "dev"),
        "suggestions": _bearer(
            load_signer(stack.credentials_dir, "suggestions").service("sandbox", [SCOPE])
        ),
        "wrong-scope": _bearer(
            load_signer(stack.credentials_dir, "memory").service("sandbox", ["sandbox:other"])
        ),
    }[who]
    answer = await _post(stack, path, body, headers)
    assert answer.status_code in (401, 403), answer.text
    assert answer.json()["detail"], answer.text


@pytest.mark.parametrize(
    "body",
    [
        {"source_session_id": "../../etc"},
        {"target_session_id": "ses x; DROP TABLE sandbox_checkpoints"},
        {"tenant_id": ""},
        {"tenant_id": "t" * 500},
        {"turns": ["req_a"]},
        {"turns": {"req_a": "../b"}},
        {"turns": {f"req_{i}": f"req_f{i}" for i in range(20_001)}},
        {"extra": "field"},
    ],
    ids=["traversal", "injection", "empty-tenant", "long-tenant", "turns-list",
         "turn-id", "too-many-turns", "unknown-field"],
)  # fmt: skip
async def test_hostile_fork_bodies_are_422(stack: LocalStack, body: dict[str, Any]) -> None:
    answer = await _post(stack, FORK, _fork(stack.tenant, **body), _memory(stack))
    assert answer.status_code == 422, answer.text


@pytest.mark.parametrize(
    "body",
    [
        {"tenant_id": "t", "session_id": "ses/../x", "remaining": []},
        {"tenant_id": "t", "session_id": "ses_x", "remaining": "req_a"},
        {"tenant_id": "t", "session_id": "ses_x", "remaining": [None]},
        {"tenant_id": "t", "session_id": "ses_x"},
        ["not", "an", "object"],
    ],
    ids=["session-id", "remaining-string", "remaining-null", "no-remaining", "not-object"],
)
async def test_hostile_rollback_bodies_are_422(stack: LocalStack, body: Any) -> None:
    answer = await _post(stack, ROLLBACK, body, _memory(stack))
    assert answer.status_code == 422, answer.text


async def test_a_fork_onto_itself_is_refused(stack: LocalStack) -> None:
    same = f"ses_{secrets.token_hex(4)}"
    body = _fork(stack.tenant, source_session_id=same, target_session_id=same)
    answer = await _post(stack, FORK, body, _memory(stack))
    assert answer.status_code == 422 and "another session" in answer.text, answer.text


async def test_memory_s_credential_never_reaches_another_tenant_s_rows(
    stack: LocalStack,
) -> None:
    """The rows are found by the tenant the body names: a fork naming a session of one
    tenant under another copies nothing, and a rollback of an unknown session adds no row.
    (memory names only the tenant of the caller's own session.)"""
    source = f"ses_{secrets.token_hex(4)}"
    async with httpx.AsyncClient(base_url=stack.url("sandbox"), timeout=30) as raw:
        copied = await raw.post(
            FORK, json=_fork(f"tenant-{secrets.token_hex(4)}", source_session_id=source),
            headers=_memory(stack),
        )  # fmt: skip
        rolled = await raw.post(
            ROLLBACK, headers=_memory(stack),
            json={"tenant_id": f"tenant-{secrets.token_hex(4)}", "session_id": source,
                  "remaining": []},
        )  # fmt: skip
    assert copied.status_code == 200 and copied.json() == {"copied": 0}, copied.text
    assert rolled.status_code == 200 and rolled.json() == {"seq": None}, rolled.text
