"""The gateway's access log never holds a key, wherever a client puts it.

An attacker (or a careless client) sends API keys and tokens in the query string, in the
headers and in the path; the access log must name only the method, the route template,
the status and the duration, so whoever reads the logs learns no credential.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path
from typing import Any

import httpx
from weft_testkit import LocalStack


def _gateway_log(stack: LocalStack) -> Path:
    return stack.log_path("gateway", stack.ports["gateway"][0])


def _access_lines(log: Path, marker_route: str) -> list[dict[str, Any]]:
    lines = []
    for text in log.read_text(errors="replace").splitlines():
        if '"http_request"' in text and marker_route in text:
            lines.append(json.loads(text))
    return lines


async def _wait_for_lines(log: Path, route: str, count: int) -> list[dict[str, Any]]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    lines = _access_lines(log, route)
    while len(lines) < count and loop.time() < deadline:
        await asyncio.sleep(0.1)  # the gateway writes the line as the response ends
        lines = _access_lines(log, route)
    return lines


async def test_keys_in_the_query_headers_or_path_never_reach_the_access_log(
    api: httpx.AsyncClient, stack: LocalStack
) -> None:
    log = _gateway_log(stack)
    forged = f"wk_forged_{secrets.token_hex(12)}"
    token = f"tok_{secrets.token_hex(12)}"
    before = len(_access_lines(log, '"/api/v1/sessions"'))
    async with httpx.AsyncClient(base_url=stack.gateway_url, timeout=30) as raw:
        ok = await raw.get(
            "/api/v1/sessions",
            params={"api_key": stack.api_key, "access_token": token},
            headers={"Authorization": f"Bearer {stack.api_key}"},
        )
        forged_header = await raw.get("/api/v1/sessions", headers={"X-API-Key": forged})
        key_in_query_only = await raw.get(
            "/api/v1/sessions", params={"api_key": stack.api_key, "token": token}
        )
        key_in_path = await raw.get(
            f"/api/v1/sessions/{forged}/messages?key={forged}",
            headers={"Authorization": f"Bearer {stack.api_key}"},
        )
    assert ok.status_code == 200, ok.text
    assert forged_header.status_code == 401
    assert key_in_query_only.status_code == 401
    assert key_in_path.status_code in (403, 404)

    lines = await _wait_for_lines(log, '"/api/v1/sessions"', before + 3)
    text = log.read_text(errors="replace")
    for secret in (stack.api_key, forged, token):
        assert secret not in text
    statuses = sorted(line["status"] for line in lines[before:])
    assert statuses == [200, 401, 401], lines[before:]
    assert all(line["method"] == "GET" for line in lines[before:])
    path_lines = await _wait_for_lines(log, '"/api/v1/sessions/{session_id}/messages"', 1)
    assert path_lines, "the request with a key in its path left no access line"
    assert forged not in log.read_text(errors="replace")
