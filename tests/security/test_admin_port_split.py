"""With ``WEFT_ADMIN_PORT`` set, no request to the public port reaches the admin API, however
it is spelled and whatever it claims in its headers, even with a valid operator token; and
the admin port serves nothing but the admin API and the health routes
(weft_gateway.admin_port). Requests are written on raw sockets so that no client library
normalises their paths first."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
from weft_gateway.turn_renewal import RENEW_PATH

from tests.admin_port_gateway import OPERATOR_TOKEN, SplitGateway, split_gateway

pytestmark = pytest.mark.infra

BODY_LIMIT = 4096


@pytest.fixture(scope="module")
def gateway(migrated: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SplitGateway]:
    workdir = tmp_path_factory.mktemp("admin-port")
    with split_gateway(migrated, workdir, WEFT_MAX_BODY_BYTES=str(BODY_LIMIT)) as running:
        yield running


async def _raw(
    port: int, method: str, target: str, headers: dict[str, str], body: bytes = b""
) -> int:
    """Send one HTTP/1.1 request line as given; the response's status code."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        lines = [f"{method} {target} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
        lines += [f"{name}: {value}" for name, value in headers.items() if name != "Host"]
        if "Host" in headers:
            lines[1] = f"Host: {headers['Host']}"
        lines.append(f"Content-Length: {len(body)}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 30)
        return int(status_line.split()[1])
    finally:
        writer.close()


def _operator() -> dict[str, str]:
    return {"Authorization": f"Bearer {OPERATOR_TOKEN}"}


async def _admin_operations(gateway: SplitGateway) -> list[tuple[str, str]]:
    """Every admin operation of the running gateway (from its OpenAPI document), with
    ``x`` for each path parameter: new admin routes are covered without editing this."""
    async with httpx.AsyncClient(timeout=30) as http:
        spec = (await http.get(f"{gateway.public_url}/openapi.json")).json()
    operations = []
    for path, methods in spec["paths"].items():
        if path.startswith("/admin/v1"):
            concrete = "/".join("x" if p.startswith("{") else p for p in path.split("/"))
            operations += [(m.upper(), concrete) for m in methods]
    return operations


async def test_no_admin_operation_answers_on_the_public_port(gateway: SplitGateway) -> None:
    operations = await _admin_operations(gateway)
    assert len(operations) >= 15  # the document did list the admin API
    body = b'{"id": "attacker", "name": "attacker"}'
    for method, path in operations:
        status = await _raw(gateway.public_port, method, path, _operator(), body)
        assert status == 404, (method, path, status)
        # The same operation on the admin port reaches the API (any answer but 404's
        # "no such route": 201, 200, 404 for tenant x... so only the tenant list is exact).
    assert await _raw(gateway.admin_port, "GET", "/admin/v1/tenants", _operator()) == 200


@pytest.mark.parametrize(
    "target",
    [
        "/admin/v1/tenants",
        "/admin/v1/tenants/",
        "/admin/v1/./tenants",
        "/admin/v1/x/../tenants",
        "/%61dmin/v1/tenants",
        "/admin%2Fv1/tenants",
        "//admin/v1/tenants",
        "/ADMIN/v1/tenants",
        "/api/v1/../../admin/v1/tenants",
        "http://127.0.0.1/admin/v1/tenants",
        "/admin/v1/tenants?x=1",
        "/admin/v1/tenants#frag",
        "/admin/v1",
    ],
)
async def test_spellings_of_an_admin_path_do_not_reach_it(
    gateway: SplitGateway, target: str
) -> None:
    assert await _raw(gateway.public_port, "GET", target, _operator()) in (400, 404)


@pytest.mark.parametrize(
    "claims",
    [
        {"Host": "127.0.0.1:{admin}"},
        {"X-Forwarded-Port": "{admin}"},
        {"X-Forwarded-Host": "127.0.0.1:{admin}", "Forwarded": "host=127.0.0.1:{admin}"},
        {"X-Original-URL": "/admin/v1/tenants", "X-Rewrite-URL": "/admin/v1/tenants"},
    ],
)
async def test_headers_claiming_the_admin_port_change_nothing(
    gateway: SplitGateway, claims: dict[str, str]
) -> None:
    headers = {k: v.format(admin=gateway.admin_port) for k, v in claims.items()}
    target = "/api/v1/sessions" if "X-Original-URL" in claims else "/admin/v1/tenants"
    status = await _raw(gateway.public_port, "GET", target, {**_operator(), **headers})
    assert status in (401, 404)  # the public route wants a tenant key; never the admin list


async def test_an_oversized_admin_request_on_the_public_port_is_404_before_any_limit(
    gateway: SplitGateway,
) -> None:
    # Refused before the body limit or any dependency runs: a prober learns nothing more
    # from a large or malformed body than from an unknown path.
    status = await _raw(
        gateway.public_port, "POST", "/admin/v1/tenants", _operator(), b"{" * (2 * BODY_LIMIT)
    )
    assert status == 404
    assert await _raw(gateway.public_port, "POST", "/admin/v1/tenants", _operator(), b"\xff") == 404


@pytest.mark.parametrize(
    ("method", "target"),
    [
        ("GET", "/api/v1/sessions"),
        ("POST", "/api/v1/agent-chat/s1"),
        ("GET", "/docs"),
        ("GET", "/openapi.json"),
        ("POST", RENEW_PATH),
        ("GET", "/"),
    ],
)
async def test_the_admin_port_serves_nothing_else(
    gateway: SplitGateway, method: str, target: str
) -> None:
    assert await _raw(gateway.admin_port, method, target, _operator()) == 404


async def test_health_answers_on_both_ports(gateway: SplitGateway) -> None:
    for port in (gateway.public_port, gateway.admin_port):
        assert await _raw(port, "GET", "/healthz", {}) == 200
