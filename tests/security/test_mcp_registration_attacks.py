"""SPEC T-19 / H-06 attacks on MCP registrations, through the public API as a hostile
tenant (and, for tool-exec's internal routes, with the credentials a turn carries).

The stack's agent-config allowlists 127.0.0.1/32 (weft_testkit: the kit's MCP servers
listen there); every other loopback or private address stays refused.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from cryptography.fernet import Fernet
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from weft_platform.credentials import API_AUDIENCE
from weft_testkit import LocalStack
from weft_testkit.mcp_servers import (
    AuthorizationServer,
    RunningServer,
    free_port,
    many_tools_server,
    protected_server,
    start,
    tools_server,
)

from tests.stack_fixtures import ApiKeys, KeyedClient

SERVERS = "/api/v1/mcp/servers"


@pytest.fixture(scope="module")
def mcp_server() -> Iterator[RunningServer]:
    running = start(tools_server("attacks"), "streamable_http")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def authority() -> Iterator[AuthorizationServer]:
    server = AuthorizationServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def oauth_server(authority: AuthorizationServer) -> Iterator[RunningServer]:
    running = protected_server(authority)
    yield running
    running.stop()


async def tenant(api_keys: ApiKeys, user: str = "dev", name: str | None = None) -> KeyedClient:
    return await api_keys.client(tenant=name or f"t-{secrets.token_hex(4)}", user=user)


async def register(client: httpx.AsyncClient, url: str, **body: Any) -> httpx.Response:
    payload = {"name": f"s-{secrets.token_hex(3)}", "url": url, **body}
    return await client.post(SERVERS, json=payload)


async def test_another_tenants_server_is_a_404_everywhere(
    api_keys: ApiKeys, mcp_server: RunningServer
) -> None:
    owner, attacker = await tenant(api_keys), await tenant(api_keys)
    made = await register(owner.http, mcp_server.url)
    assert made.status_code == 201, made.text
    sid = made.json()["id"]
    assert made.json()["status"] == "ok" and made.json()["tools_count"] > 0
    attempts = [
        attacker.http.get(f"{SERVERS}/{sid}"),
        attacker.http.patch(f"{SERVERS}/{sid}", json={"enabled": False}),
        attacker.http.post(f"{SERVERS}/{sid}/refresh"),
        attacker.http.get(f"{SERVERS}/{sid}/tools"),
        attacker.http.patch(f"{SERVERS}/{sid}/tools/echo", json={"always_ask": False}),
        attacker.http.delete(f"{SERVERS}/{sid}"),
    ]
    for attempt in attempts:
        resp = await attempt
        assert resp.status_code == 404, resp.text
    assert (await attacker.http.get(SERVERS)).json() == []
    agent = {"name": "thief", "mcp_selection_mode": "selected", "mcp_services": [sid]}
    resp = await attacker.http.post("/api/v1/agents", json=agent)
    assert resp.status_code == 400 and "not found" in resp.text
    still = await owner.http.get(f"{SERVERS}/{sid}/tools")
    assert {t["tool_name"] for t in still.json()} >= {"echo", "add"}
    assert all(t["always_ask"] for t in still.json())
    # Its owner can delete it, and then it is gone for the owner too.
    assert (await owner.http.delete(f"{SERVERS}/{sid}")).status_code == 204
    for gone in (f"{SERVERS}/{sid}", f"{SERVERS}/{sid}/tools"):
        assert (await owner.http.get(gone)).status_code == 404
    assert (await owner.http.get(SERVERS)).json() == []


async def test_header_values_are_never_answered_logged_or_stored_in_clear(
    api_keys: ApiKeys, mcp_server: RunningServer, stack: LocalStack, infra: dict[str, str]
) -> None:
    owner = await tenant(api_keys)
    secret = f"sk-{secrets.token_hex(16)}"
    made = await register(owner.http, mcp_server.url, headers={"X-Api-Key": secret})
    assert made.status_code == 201, made.text
    sid = made.json()["id"]
    assert made.json()["header_names"] == ["X-Api-Key"]
    answers = [
        made,
        await owner.http.get(SERVERS),
        await owner.http.get(f"{SERVERS}/{sid}"),
        await owner.http.post(f"{SERVERS}/{sid}/refresh"),
        await owner.http.patch(f"{SERVERS}/{sid}", json={"description": "d"}),
    ]
    for answer in answers:
        assert answer.status_code == 200 or answer.status_code == 201, answer.text
        assert secret not in answer.text
    for name in ("agent_config", "gateway"):
        log = stack.log_path(name, stack.ports[name][0])
        assert secret not in log.read_text(errors="replace")
    engine = create_async_engine(infra["WEFT_DATABASE_URL"])
    try:
        async with engine.connect() as conn:
            row = (
                await conn.execute(
                    text("SELECT headers_encrypted, header_names FROM mcp_servers WHERE id = :i"),
                    {"i": sid},
                )
            ).one()
    finally:
        await engine.dispose()
    assert secret not in row[0] and secret not in str(row[1])
    assert secret in Fernet(stack.mcp_secret_keys.encode()).decrypt(row[0].encode()).decode()


@pytest.mark.parametrize(
    "host",
    ["127.0.0.2", "10.0.0.1", "169.254.169.254", "192.168.1.1", "[::1]", "0.0.0.0"],
)
async def test_loopback_and_private_urls_are_refused_outside_the_allowlist(
    api_keys: ApiKeys, mcp_server: RunningServer, host: str
) -> None:
    owner = await tenant(api_keys)
    port = urlsplit(mcp_server.url).port
    resp = await register(owner.http, f"http://{host}:{port}/mcp")
    assert resp.status_code == 422, resp.text
    assert "server URL refused" in resp.text
    assert (await owner.http.get(SERVERS)).json() == []


@pytest.mark.parametrize(
    "url",
    ["ftp://127.0.0.1/mcp", "http://user:pw@127.0.0.1:1/mcp", "http://127.0.0.1:1/mcp#x"],
)
async def test_urls_with_other_schemes_userinfo_or_fragments_are_refused(
    api_keys: ApiKeys, url: str
) -> None:
    owner = await tenant(api_keys)
    resp = await register(owner.http, url)
    assert resp.status_code == 422 and "server URL refused" in resp.text


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Evil": "a\r\nX-Injected: 1"},
        {"Host": "169.254.169.254"},
        {"Transfer-Encoding": "chunked"},
        {"Bad Name": "v"},
        {f"X-H{i}": "v" for i in range(21)},
        {"X-Big": "x" * 9000},
    ],
)
async def test_bad_headers_are_refused(
    api_keys: ApiKeys, mcp_server: RunningServer, headers: dict[str, str]
) -> None:
    owner = await tenant(api_keys)
    resp = await register(owner.http, mcp_server.url, headers=headers)
    assert resp.status_code == 422, resp.text
    made = await register(owner.http, mcp_server.url)
    patched = await owner.http.patch(f"{SERVERS}/{made.json()['id']}", json={"headers": headers})
    assert patched.status_code == 422, patched.text


async def test_caps_on_servers_per_tenant_and_tools_per_server(api_keys: ApiKeys) -> None:
    owner = await tenant(api_keys)
    closed = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens: registers as error
    for i in range(20):
        resp = await owner.http.post(SERVERS, json={"name": f"down-{i}", "url": closed})
        assert resp.status_code == 201, resp.text
        assert resp.json()["status"] == "error" and resp.json()["last_error"]
    over = await owner.http.post(SERVERS, json={"name": "one-too-many", "url": closed})
    assert over.status_code == 409 and "at most 20" in over.text
    other = await tenant(api_keys)
    many = start(many_tools_server(105), "streamable_http")
    try:
        resp = await other.http.post(SERVERS, json={"name": "many", "url": many.url})
    finally:
        many.stop()
    assert resp.status_code == 201, resp.text
    assert resp.json()["tools_count"] == 100 and resp.json()["tools_dropped"] == 5


async def test_names_are_unique_per_tenant_only(
    api_keys: ApiKeys, mcp_server: RunningServer
) -> None:
    one, two = await tenant(api_keys), await tenant(api_keys)
    assert (await register(one.http, mcp_server.url, name="same")).status_code == 201
    again = await register(one.http, mcp_server.url, name="same")
    assert again.status_code == 409 and "already exists" in again.text
    assert (await register(two.http, mcp_server.url, name="same")).status_code == 201


# --- tool-exec's internal routes and the OAuth state ----------------------------------------


def turn_headers(stack: LocalStack, tenant_id: str, user: str = "dev") -> dict[str, str]:
    token = stack.credentials.gateway.request(
        tenant_id=tenant_id,
        user_id=user,
        session_id=f"s-{secrets.token_hex(4)}",
        request_id=f"r-{secrets.token_hex(4)}",
        audience=["agent-config", "tool-exec"],
        ttl_s=300,
    )
    return {"Authorization": f"Bearer {token}"}


def callback_headers(stack: LocalStack, scope: str = "mcp:oauth-callback") -> dict[str, str]:
    return {"Authorization": f"Bearer {stack.credentials.gateway.service('agent-config', [scope])}"}


async def test_internal_routes_refuse_another_tenant_and_the_wrong_audience(
    api_keys: ApiKeys, mcp_server: RunningServer, stack: LocalStack
) -> None:
    owner_id = f"t-{secrets.token_hex(4)}"
    owner = await tenant(api_keys, name=owner_id)
    sid = (await register(owner.http, mcp_server.url, headers={"X-K": "v1"})).json()["id"]
    base = stack.url("agent_config")
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        own = await http.get(
            f"/internal/mcp/servers/{sid}/connection", headers=turn_headers(stack, owner_id)
        )
        assert own.status_code == 200 and own.json()["headers"] == {"X-K": "v1"}
        other = turn_headers(stack, f"t-{secrets.token_hex(4)}")
        stolen = await http.get(f"/internal/mcp/servers/{sid}/connection", headers=other)
        assert stolen.status_code == 404 and "v1" not in stolen.text
        catalog = await http.get("/internal/mcp/catalog", params={"server_id": sid}, headers=other)
        assert catalog.status_code == 200 and catalog.json()["servers"] == []
        auth = await http.post(
            f"/internal/mcp/servers/{sid}/authorization", json={"call_id": "c1"}, headers=other
        )
        assert auth.status_code == 404
        wrong_audience = stack.credentials.gateway.request(
            tenant_id=owner_id, user_id="dev", audience=["memory"], ttl_s=300
        )
        resp = await http.get(
            f"/internal/mcp/servers/{sid}/connection",
            headers={"Authorization": f"Bearer {wrong_audience}"},
        )
        assert resp.status_code == 401
        resp = await http.get(f"/internal/mcp/servers/{sid}/connection")
        assert resp.status_code == 401
        # An API request's credential (what the gateway mints for any call of the owner's
        # key, also meant for agent-config) names no turn: never the secrets.
        api_request = stack.credentials.gateway.request(
            tenant_id=owner_id, user_id="dev", audience=API_AUDIENCE, ttl_s=300
        )
        bearer = {"Authorization": f"Bearer {api_request}"}
        for path in (f"/internal/mcp/servers/{sid}/connection", "/internal/mcp/catalog"):
            resp = await http.get(path, params={"server_id": sid}, headers=bearer)
            assert resp.status_code == 403 and "v1" not in resp.text, (path, resp.text)


async def authorize_in_browser(url: str) -> tuple[str, str]:
    """What the user's browser does: the authorisation server redirects back at once;
    the redirect's code and state (the gateway's callback is not followed here)."""
    async with httpx.AsyncClient(timeout=10) as browser:
        resp = await browser.get(url)
    assert resp.status_code == 302, resp.text
    query = parse_qs(urlsplit(resp.headers["location"]).query)
    return query["code"][0], query["state"][0]


async def test_oauth_state_is_single_use_bound_to_its_user_and_not_forgeable(
    api_keys: ApiKeys, oauth_server: RunningServer, stack: LocalStack, infra: dict[str, str]
) -> None:
    tenant_id = f"t-{secrets.token_hex(4)}"
    owner = await tenant(api_keys, name=tenant_id)
    made = await register(owner.http, oauth_server.url)
    assert made.json()["status"] == "authorization_required", made.text
    sid = made.json()["id"]
    async with httpx.AsyncClient(base_url=stack.url("agent_config"), timeout=30) as http:
        alice = turn_headers(stack, tenant_id, "alice")
        start_auth = await http.post(
            f"/internal/mcp/servers/{sid}/authorization", json={"call_id": "call-1"}, headers=alice
        )
        assert start_auth.status_code == 200, start_auth.text
        code, state = await authorize_in_browser(start_auth.json()["authorization_url"])
        forged = await http.post(
            "/internal/mcp/oauth/callback",
            headers=callback_headers(stack),
            json={"state": secrets.token_urlsafe(32), "code": code},
        )
        assert forged.status_code == 400 and "unknown" in forged.text
        as_user = await http.post(
            "/internal/mcp/oauth/callback", headers=alice, json={"state": state, "code": code}
        )
        assert as_user.status_code in (401, 403)
        wrong_scope = callback_headers(stack, "agent-config:suggestion-settings")
        resp = await http.post(
            "/internal/mcp/oauth/callback", headers=wrong_scope, json={"state": state, "code": code}
        )
        assert resp.status_code == 403
        done = await http.post(
            "/internal/mcp/oauth/callback",
            headers=callback_headers(stack),
            json={"state": state, "code": code},
        )
        assert done.status_code == 200, done.text
        assert done.json()["outcome"] == "authorized"
        assert (done.json()["user_id"], done.json()["call_id"]) == ("alice", "call-1")
        replay = await http.post(
            "/internal/mcp/oauth/callback",
            headers=callback_headers(stack),
            json={"state": state, "code": code},
        )
        assert replay.status_code == 400 and "already used" in replay.text
        mine = await http.get(f"/internal/mcp/servers/{sid}/connection", headers=alice)
        assert mine.json()["access_token"]
        bob = turn_headers(stack, tenant_id, "bob")
        theirs = await http.get(f"/internal/mcp/servers/{sid}/connection", headers=bob)
        assert theirs.status_code == 200 and theirs.json()["access_token"] is None
        catalog = await http.get(
            "/internal/mcp/catalog", headers=alice, params={"server_id": sid, "refresh": "true"}
        )
        listed = catalog.json()["servers"][0]
        assert listed["status"] == "ok" and {t["tool_name"] for t in listed["tools"]} >= {"echo"}
    engine = create_async_engine(infra["WEFT_DATABASE_URL"])
    try:
        async with engine.connect() as conn:
            states = (
                await conn.execute(
                    text(
                        "SELECT state_hash, verifier_encrypted FROM mcp_oauth_states "
                        "WHERE server_id = :s"
                    ),
                    {"s": sid},
                )
            ).all()
            tokens = (
                (
                    await conn.execute(
                        text("SELECT tokens_encrypted FROM mcp_user_tokens WHERE server_id = :s"),
                        {"s": sid},
                    )
                )
                .scalars()
                .all()
            )
    finally:
        await engine.dispose()
    assert [s for s, _ in states] != [state] and state not in str(states)
    token = mine.json()["access_token"]
    assert tokens and all(token not in t for t in tokens)


async def test_the_reencrypt_route_is_for_operators_only(stack: LocalStack) -> None:
    async with httpx.AsyncClient(base_url=stack.url("agent_config"), timeout=30) as http:
        as_tenant = turn_headers(stack, f"t-{secrets.token_hex(4)}")
        assert (await http.post("/internal/mcp/reencrypt", headers=as_tenant)).status_code == 401
        operator = stack.credentials.operator_headers("agent-config", "agent-config:mcp-reencrypt")
        resp = await http.post("/internal/mcp/reencrypt", headers=operator)
        assert resp.status_code == 200, resp.text
        assert resp.json()["mcp_servers.headers_encrypted"] >= 0


async def test_the_gateways_callback_completes_once_and_replays_are_refused(
    api_keys: ApiKeys, oauth_server: RunningServer, stack: LocalStack
) -> None:
    """The browser's whole round trip: authorisation server -> the gateway's public
    callback (no API key) -> agent-config's state check and code exchange."""
    tenant_id = f"t-{secrets.token_hex(4)}"
    owner = await tenant(api_keys, name=tenant_id)
    sid = (await register(owner.http, oauth_server.url)).json()["id"]
    async with httpx.AsyncClient(base_url=stack.url("agent_config"), timeout=30) as http:
        started = await http.post(
            f"/internal/mcp/servers/{sid}/authorization",
            json={"call_id": "call-9"},
            headers=turn_headers(stack, tenant_id, "carol"),
        )
        assert started.status_code == 200, started.text
        async with httpx.AsyncClient(timeout=30) as browser:
            sent = await browser.get(started.json()["authorization_url"])
            back = sent.headers["location"]
            assert back.startswith(f"{stack.gateway_url}/api/v1/mcp/oauth/callback?")
            landed = await browser.get(back)
            assert landed.status_code == 200 and "Authorised" in landed.text
            replayed = await browser.get(back)
            assert replayed.status_code == 400 and "already used" in replayed.text
        conn = await http.get(
            f"/internal/mcp/servers/{sid}/connection",
            headers=turn_headers(stack, tenant_id, "carol"),
        )
        assert conn.json()["access_token"]
