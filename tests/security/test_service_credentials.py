"""Every internal route of memory, agent-config, tool-exec and suggestions, attacked the
way a network neighbour would (docs/security.md "Service credentials"): without a
credential, with an expired one, with another tenant's, user's or session's, with one
meant for another service or of the other kind (a request credential on a system route, a
service credential on a tenant route).
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from weft_agent_config.app import create_app as agent_config_app
from weft_knowledge.api import RETRIEVAL_ROUTES
from weft_knowledge.app import create_app as knowledge_app
from weft_knowledge.wiki_api import WIKI_SYSTEM_ROUTES
from weft_memory.app import create_app as memory_app
from weft_platform.credentials import CredentialSigner, load_signer
from weft_suggestions.app import create_app as suggestions_app
from weft_testkit.credentials import DevCredentials, credentials_dir
from weft_tool_exec.app import create_app as tool_exec_app

TENANT, OTHER_TENANT = "tenant-cred-a", "tenant-cred-b"
USER, OTHER_USER = "user-a", "user-b"
SESSION, OTHER_SESSION = "ses_cred_a", "ses_cred_b"

APPS: dict[str, Callable[[], FastAPI]] = {
    "memory": memory_app,
    "agent-config": agent_config_app,
    "tool-exec": tool_exec_app,
    "suggestions": suggestions_app,
    "knowledge": knowledge_app,
}
SYSTEM: dict[str, tuple[str, str]] = {
    "/internal/turns/unfinished": ("memory", "memory:turns.read"),
    "/internal/usage": ("memory", "memory:usage.read"),
    "/internal/usage/documents/{document_id}": ("memory", "memory:usage.write"),
    "/internal/usage/model-calls/{source_id}": ("memory", "memory:usage.write"),
    "/internal/knowledge-bases/lookup": ("knowledge", "knowledge:bases.read"),
    "/internal/document-titles": ("knowledge", "knowledge:titles.read"),
    "/internal/organisations": ("agent-config", "agent-config:organisations"),
    "/internal/organisations/{org_id}/members/{member_tenant}": (
        "agent-config",
        "agent-config:organisations",
    ),
    "/internal/state": ("tool-exec", "tool-exec:state"),
    "/internal/suggestion-settings/{agent_id}": (
        "agent-config",
        "agent-config:suggestion-settings",
    ),
    "/internal/mcp/oauth/callback": ("agent-config", "mcp:oauth-callback"),
    "/internal/mcp/reencrypt": ("agent-config", "agent-config:mcp-reencrypt"),
}
"""The system routes and the scope each wants; any other route is a tenant route."""
PURGE_ROUTES = {
    "/internal/tenants/{tenant_id}/data",
    "/internal/tenants/{tenant_id}/users/{user_id}/data",
    "/internal/tenants/{tenant_id}/users/{user_id}/data/residue",
    "/internal/tenants/{tenant_id}/session-ids",
    "/internal/tenants/{tenant_id}/turn-ids",
    "/internal/tenants/{tenant_id}/messages",
}
"""The owners' tenant-purge routes (``weft_storage.owner_purge``): system routes for the
gateway's own service credential alone, scope ``<service>:tenant-data``."""
BOTH: dict[str, tuple[str, str]] = {
    "/internal/turns/{request_id}/suspension": ("memory", "memory:suspensions.read"),
    **dict.fromkeys(RETRIEVAL_ROUTES, ("knowledge", "knowledge:retrieve")),
    **dict.fromkeys(WIKI_SYSTEM_ROUTES, ("knowledge", "knowledge:retrieve")),
}
"""Tenant routes a service credential with this scope opens too (``also_requests``): there
a service credential without the scope is a 403, not a 401. PUT shares the path: a
service credential never writes (401 in the route), see tests/security/test_approvals.py."""


@dataclass
class Route:
    """One operation of a service's internal API, as its OpenAPI document lists it."""

    service: str
    method: str
    path: str
    query: set[str] = field(default_factory=set)
    body: set[str] | None = None
    """Top-level fields of the JSON body (None: the route takes no body)."""

    @property
    def system(self) -> bool:
        return self.path in SYSTEM or self.path in PURGE_ROUTES

    def names(self, name: str) -> bool:
        """Whether the request names ``name`` (tenant_id, user_id, session_id)."""
        return name in self.query or name in (self.body or ()) or f"{{{name}}}" in self.path

    def request(self, headers: dict[str, str]) -> httpx.Request:
        """The request as a caller acting for TENANT / USER / SESSION sends it."""
        path = self.path.replace("{session_id}", SESSION)
        while "{" in path:
            start, end = path.index("{"), path.index("}")
            path = path[:start] + "x-1" + path[end + 1 :]
        values = {"tenant_id": TENANT, "user_id": USER, "session_id": SESSION}
        params = {k: v for k, v in values.items() if k in self.query}
        body = None if self.body is None else {k: v for k, v in values.items() if k in self.body}
        url = f"http://{self.service}{path}"
        return httpx.Request(self.method, url, params=params, json=body, headers=headers)


def _routes(service: str, app: FastAPI) -> list[Route]:
    doc = app.openapi()
    schemas = doc.get("components", {}).get("schemas", {})
    found = []
    for path, operations in doc["paths"].items():
        if not path.startswith("/internal"):
            continue
        for method, op in operations.items():
            query = {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}
            body = _body_fields(op, schemas)
            found.append(Route(service, method.upper(), path, query, body))
    return found


def _body_fields(op: dict[str, Any], schemas: dict[str, Any]) -> set[str] | None:
    if "requestBody" not in op:
        return None
    schema = op["requestBody"]["content"]["application/json"]["schema"]
    ref = schema.get("$ref", "")
    properties = schemas.get(ref.rsplit("/", 1)[-1], schema).get("properties", {})
    return set(properties)


Served = tuple[list[Route], httpx.AsyncClient]
"""A service's internal routes and an in-process client of its app."""


@contextlib.asynccontextmanager
async def serve(name: str) -> AsyncIterator[Served]:
    """The app of service ``name`` alone, as deployed (its credential guard on): building
    every service's app for each case took most of this module's time."""
    app = APPS[name]()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) as client:
        yield _routes(name, app), client


@pytest.fixture
async def one_service(migrated: str, service: str) -> AsyncIterator[Served]:
    """The test's ``service``, served."""
    async with serve(service) as served:
        yield served


@pytest.fixture
async def memory(migrated: str) -> AsyncIterator[httpx.AsyncClient]:
    """memory's app alone (usage belongs to memory)."""
    async with serve("memory") as (_, client):
        yield client


@pytest.fixture(scope="module")
def keys() -> DevCredentials:
    """The signers of the key folder the in-process apps verify with."""
    return DevCredentials.load(credentials_dir())


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _system(keys: DevCredentials, route: Route) -> tuple[CredentialSigner, str, str]:
    """Who may call a system route: the signer, the audience and the scope."""
    if route.path in PURGE_ROUTES:
        return keys.gateway, route.service, f"{route.service}:tenant-data"
    audience, scope = SYSTEM[route.path]
    return keys.operator, audience, scope


def _expired(keys: DevCredentials, route: Route) -> str:
    two_hours_ago = time.time() - 7200
    if route.system:
        signer, audience, scope = _system(keys, route)
        return signer.service(audience, [scope], 60, issued_at=two_hours_ago)
    return keys.gateway.request(
        tenant_id=TENANT,
        user_id=USER,
        audience=[route.service],
        ttl_s=60,
        issued_at=two_hours_ago,
    )


TURN_ONLY = {
    "/internal/mcp/catalog",
    "/internal/mcp/servers/{server_id}/connection",
    "/internal/mcp/servers/{server_id}/authorization",
}
"""Routes that take only a turn's credential (one naming its session and turn): an MCP
server's secrets go to a tool call, never to an API request's credential."""


def _turn(route: Route, session: str | None = None) -> tuple[str | None, str | None]:
    """The session and turn a credential names: ``session`` (and no turn), or on a
    turn-only route a session (``session`` or the case's own) and a turn."""
    if route.path not in TURN_ONLY:
        return session, None
    return session or SESSION, "req_turn"


def _right(keys: DevCredentials, route: Route) -> str:
    if route.system:
        signer, audience, scope = _system(keys, route)
        return signer.service(audience, [scope])
    sid, rid = _turn(route, SESSION)
    return keys.gateway.request(
        tenant_id=TENANT, user_id=USER, session_id=sid, request_id=rid,
        audience=[route.service], ttl_s=60,
    )  # fmt: skip


Case = Callable[[DevCredentials, Route], tuple[dict[str, str], set[int] | None]]
"""Headers to send and the statuses expected (None: anything but 401 and 403: served)."""


def _none(keys: DevCredentials, route: Route) -> tuple[dict[str, str], set[int] | None]:
    return {}, {401}


def _malformed(keys: DevCredentials, route: Route) -> tuple[dict[str, str], set[int] | None]:
    return _bearer("not.a.jwt"), {401}


def _expired_case(keys: DevCredentials, route: Route) -> tuple[dict[str, str], set[int] | None]:
    return _bearer(_expired(keys, route)), {401}


def _other_tenant(keys: DevCredentials, route: Route) -> tuple[dict[str, str], set[int] | None]:
    if route.system:  # a request credential never opens a system route
        token = keys.request(OTHER_TENANT, USER)
        return _bearer(token), {401}
    token = keys.gateway.request(
        tenant_id=OTHER_TENANT, user_id=USER, session_id=_turn(route)[0],
        request_id=_turn(route)[1], audience=[route.service], ttl_s=60,
    )  # fmt: skip
    return _bearer(token), {403} if route.names("tenant_id") else None


def _other_user(keys: DevCredentials, route: Route) -> tuple[dict[str, str], set[int] | None]:
    if route.system:
        return _bearer(keys.request(TENANT, OTHER_USER)), {401}
    token = keys.gateway.request(
        tenant_id=TENANT, user_id=OTHER_USER, session_id=_turn(route)[0],
        request_id=_turn(route)[1], audience=[route.service], ttl_s=60,
    )  # fmt: skip
    return _bearer(token), {403} if route.names("user_id") else None


def _other_session(keys: DevCredentials, route: Route) -> tuple[dict[str, str], set[int] | None]:
    if route.system:
        return _bearer(keys.request(TENANT, USER, OTHER_SESSION)), {401}
    sid, rid = _turn(route, OTHER_SESSION)
    token = keys.gateway.request(
        tenant_id=TENANT, user_id=USER, session_id=sid, request_id=rid,
        audience=[route.service], ttl_s=60,
    )  # fmt: skip
    return _bearer(token), {403} if route.names("session_id") else None


def _other_audience(keys: DevCredentials, route: Route) -> tuple[dict[str, str], set[int] | None]:
    elsewhere = next(name for name in APPS if name != route.service)
    if route.system:
        signer, _, scope = _system(keys, route)
        return _bearer(signer.service(elsewhere, [scope])), {401}
    token = keys.gateway.request(tenant_id=TENANT, user_id=USER, audience=[elsewhere], ttl_s=60)
    return _bearer(token), {401}


def _other_kind(keys: DevCredentials, route: Route) -> tuple[dict[str, str], set[int] | None]:
    if route.system:  # the right caller's credential, but for another system scope
        signer, audience, _ = _system(keys, route)
        return _bearer(signer.service(audience, ["some:other.scope"])), {403}
    if route.path in BOTH:
        audience, _ = BOTH[route.path]
        return _bearer(keys.operator.service(audience, ["memory:turns.read"])), {403}
    # A service credential (no tenant) on a tenant route.
    return _bearer(keys.operator.service(route.service, ["memory:turns.read"])), {401}


def _right_case(keys: DevCredentials, route: Route) -> tuple[dict[str, str], set[int] | None]:
    return _bearer(_right(keys, route)), None


CASES: dict[str, Case] = {
    "no credential": _none,
    "malformed": _malformed,
    "expired": _expired_case,
    "another tenant": _other_tenant,
    "another user": _other_user,
    "another session": _other_session,
    "another audience": _other_audience,
    "other kind or scope": _other_kind,
    "the right credential": _right_case,
}


@pytest.mark.parametrize("service", list(APPS))
@pytest.mark.parametrize("case", list(CASES))
async def test_every_internal_route_checks_the_credential(
    one_service: Served,
    keys: DevCredentials,
    service: str,
    case: str,
) -> None:
    routes, client = one_service
    assert routes, f"{service} lists no internal route"
    wrong = []
    for route in routes:
        headers, expected = CASES[case](keys, route)
        resp = await client.send(route.request(headers))
        served = resp.status_code not in (401, 403)
        if (expected is None and not served) or (
            expected is not None and resp.status_code not in expected
        ):
            wrong.append(f"{route.method} {route.path}: {resp.status_code} {resp.text[:160]}")
    assert not wrong, f"{case}: " + "; ".join(wrong)


async def test_the_engine_may_read_unfinished_turns_but_not_manage_organisations(
    memory: httpx.AsyncClient,
) -> None:
    """A system scope names its issuers: the engine's own key opens the turn audit route,
    not the operator's organisations, even with the right scope."""
    engine = load_signer(credentials_dir(), "engine")
    turns = await memory.get(
        "http://memory/internal/turns/unfinished",
        params={"started_after": "2026-01-01T00:00:00Z"},
        headers=_bearer(engine.service("memory", ["memory:turns.read"])),
    )
    assert turns.status_code == 200, turns.text
    token = engine.service("agent-config", ["agent-config:organisations"])
    async with serve("agent-config") as (_, agent_config):
        org = await agent_config.post(
            "http://agent-config/internal/organisations", json={"name": "x"},
            headers=_bearer(token),
        )  # fmt: skip
    assert org.status_code == 403, org.text


@pytest.mark.parametrize(
    ("size", "status"), [(2**53 + 1, 422), (2**63, 422), (-1, 422), (2**53, 204)]
)
async def test_document_usage_refuses_a_size_no_column_holds(
    memory: httpx.AsyncClient, keys: DevCredentials, size: int, status: int
) -> None:
    """knowledge reports an ingested document's size to memory (usage belongs to memory).
    A size past 2^53 (or negative) is a 422 naming the field, never a database overflow
    (a 500) or a wrapped-around total; 2^53 itself is stored."""
    token = keys.operator.service("memory", ["memory:usage.write"])
    resp = await memory.put(
        f"http://memory/internal/usage/documents/doc-size-{size}",
        json={"tenant_id": TENANT, "size_bytes": size},
        headers=_bearer(token),
    )
    assert resp.status_code == status, resp.text
    if status == 422:
        assert "size_bytes" in resp.text


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"input_tokens": 2**53 + 1}, "input_tokens"),
        ({"output_tokens": -1}, "output_tokens"),
        ({"llm_calls": 2**31}, "llm_calls"),
        ({"source": "turn"}, "source"),  # a turn's row is the engine's, never overwritten
        ({"tenant_id": ""}, "tenant_id"),
        ({"extra": 1}, None),
    ],
)
async def test_model_call_usage_refuses_what_no_row_should_hold(
    memory: httpx.AsyncClient, keys: DevCredentials, change: dict[str, object], field: str | None
) -> None:
    """knowledge meters graph extraction's model calls in memory's usage: counts past a
    column, negative ones, or a source other than ingestion's are a 422 naming the field;
    a valid report is stored, and repeating it stores it once (the totals replace)."""
    token = keys.operator.service("memory", ["memory:usage.write"])
    tenant = f"t-usage-{secrets.token_hex(4)}"
    body = {"tenant_id": tenant, "source": "graph", "input_tokens": 10, "output_tokens": 2,
            "llm_calls": 1}  # fmt: skip
    path = f"http://memory/internal/usage/model-calls/doc-{secrets.token_hex(4)}:1"
    for _ in range(2):
        ok = await memory.put(path, json=body, headers=_bearer(token))
        assert ok.status_code == 204, ok.text
    now = datetime.now(UTC)
    period = {"tenant_id": tenant, "from": (now - timedelta(days=1)).isoformat(),
              "to": (now + timedelta(days=1)).isoformat()}  # fmt: skip
    reader = keys.operator.service("memory", ["memory:usage.read"])
    report = await memory.get(
        "http://memory/internal/usage", params=period, headers=_bearer(reader)
    )
    assert report.status_code == 200, report.text
    (totals,) = report.json()["totals"]
    assert (totals["input_tokens"], totals["llm_calls"]) == (10, 1)  # counted once
    resp = await memory.put(path, json={**body, **change}, headers=_bearer(token))
    if field is None:
        assert resp.status_code == 204  # unknown fields are ignored, as on every route
        return
    assert resp.status_code == 422 and field in resp.text, resp.text
    too_long = await memory.put(
        "http://memory/internal/usage/model-calls/" + "x" * 129, json=body,
        headers=_bearer(token),
    )  # fmt: skip
    assert too_long.status_code == 422
