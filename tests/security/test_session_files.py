"""Hostile input against the session files API (SPEC S-01, S-02; ARCHITECTURE invariant
5): oversize and wrongly typed uploads, unsafe names, path escapes and links out on
download, another tenant's and another user's session, and the sandbox's internal routes
without or with someone else's credential. Every refusal is a 4xx with its reason; the
stack keeps serving."""

from __future__ import annotations

import asyncio
import secrets

import httpx
import pytest
from weft_testkit import LocalStack, read_turn

from tests.stack_fixtures import ApiKeys

MAX_BYTES = 10 * 1024 * 1024  # the gateway's default WEFT_ATTACHMENT_MAX_BYTES


async def _session(api: httpx.AsyncClient, *, sandbox: bool = True) -> str:
    agent = await api.post(
        "/api/v1/agents",
        json={"name": f"files-{secrets.token_hex(3)}", "allowed_tools": ["shell_exec"],
              "sandbox_enabled": sandbox, "kb_selection_mode": "none"},
    )  # fmt: skip
    assert agent.status_code == 201, agent.text
    created = await api.post("/api/v1/sessions", json={"agent_id": agent.json()["id"]})
    return str(created.json()["id"])


async def _upload(
    api: httpx.AsyncClient, sid: str, name: str, data: bytes = b"a,b\n1,2\n"
) -> httpx.Response:
    """A multipart body built by hand: httpx would percent-encode a control character of
    the file name, and a hostile client does not."""
    boundary = secrets.token_hex(8)
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="'.encode()
        + name.encode()
        + b'"\r\nContent-Type: application/octet-stream\r\n\r\n'
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return await api.post(
        f"/api/v1/sessions/{sid}/files", content=body,
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )  # fmt: skip


async def test_oversize_wrong_type_and_unsafe_names_are_refused_with_the_reason(
    api: httpx.AsyncClient,
) -> None:
    sid = await _session(api)
    big = await _upload(api, sid, "big.csv", b"x" * (MAX_BYTES + 1))
    assert big.status_code == 413 and "limit" in big.json()["detail"], big.text
    exe = await _upload(api, sid, "tool.exe")
    assert exe.status_code == 415 and ".exe" in exe.json()["detail"], exe.text
    bare = await _upload(api, sid, "Makefile")
    assert bare.status_code == 415, bare.text
    for name, reason in [
        ("../evil.csv", "path separator"), ("a/b.csv", "path separator"),
        ("..\\x.csv", "path separator"), ("..", "not a file name"),
        ("a\x01b.csv", "control character"), (" x.csv", "white space"),
        ("x" * 300 + ".csv", "longer than"),
    ]:  # fmt: skip
        bad = await _upload(api, sid, name)
        assert bad.status_code == 422 and reason in str(bad.json()["detail"]), (name, bad.text)
    empty = await api.post(f"/api/v1/sessions/{sid}/files", files={"other": ("a.csv", b"x")})
    assert empty.status_code == 422, empty.text  # no `file` part
    listed = await api.get(f"/api/v1/sessions/{sid}/files", params={"dir": "input"})
    assert listed.status_code == 200 and listed.json()["files"] == [], listed.text
    wrong_dir = await api.get(f"/api/v1/sessions/{sid}/files", params={"dir": "../etc"})
    assert wrong_dir.status_code == 422, wrong_dir.text
    assert (await _upload(api, sid, "fine.csv")).status_code == 201  # still serving


async def test_downloads_refuse_escapes_and_links_a_command_planted(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:
    sid = await _session(api)
    assert (await _upload(api, sid, "data.csv")).status_code == 201
    plant = ("echo fine > output/ok.md; ln -s /etc/passwd output/passwd; "
             "ln -s ../input/data.csv output/attached; ln -s / output/root")  # fmt: skip
    script = {"steps": [
        {"match": "PLANT-LINKS", "tool_calls": [
            {"id": "call_plant", "name": "shell_exec", "arguments": {"command": plant}}]},
        {"match": "PLANT-LINKS", "content": "planted"},
    ]}  # fmt: skip
    assert (await llm.post("/_script", json=script)).status_code == 200
    events = await read_turn(
        api, f"/api/v1/agent-chat/{sid}", api_key=stack.api_key,
        json_body={"query": "PLANT-LINKS now"}, timeout_s=240,
    )  # fmt: skip
    assert [e.data["data"]["path"] for e in events if e.event == "deliverable"] == ["output/ok.md"]

    listed = (await api.get(f"/api/v1/sessions/{sid}/files")).json()["files"]
    assert [f["path"] for f in listed] == ["output/ok.md"]
    base = f"/api/v1/sessions/{sid}/files"
    for path in ["output/passwd", "output/root/etc/passwd", "output/attached", "work/x",
                 "output/missing.md", "output"]:  # fmt: skip
        got = await api.get(f"{base}/{path}")
        assert got.status_code == 404, (path, got.status_code, got.text)
        assert b"root:" not in got.content
    for path in ["output/../input/data.csv", "output/%2e%2e/input/data.csv",
                 "output/..%2Finput%2Fdata.csv", "%2Fetc%2Fpasswd", "output/a%00b",
                 "output//etc/passwd"]:  # fmt: skip
        status, body = await _raw_get(stack, f"{base}/{path}")  # as sent, not normalised
        assert status in (404, 422), (path, status, body)
        assert b"root:" not in body and b"a,b" not in body
    ok = await api.get(f"{base}/output/ok.md")
    assert ok.status_code == 200 and ok.content == b"fine\n"


async def _raw_get(stack: LocalStack, target: str) -> tuple[int, bytes]:
    """GET ``target`` byte for byte (httpx would remove dot segments first)."""
    port = int(stack.gateway_url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
            f"{stack.api_key}\r\nConnection: close\r\n\r\n".encode()
        )
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), timeout=30)
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


async def test_another_tenants_or_users_session_is_not_found(
    api: httpx.AsyncClient, api_keys: ApiKeys
) -> None:
    sid = await _session(api)
    assert (await _upload(api, sid, "secret.csv", b"salary,100\n")).status_code == 201
    other_tenant = await api_keys.client(tenant=f"tenant-{secrets.token_hex(4)}")
    other_user = await api_keys.client(user=f"mallory-{secrets.token_hex(3)}")
    for intruder in (other_tenant.http, other_user.http):
        assert (await intruder.get(f"/api/v1/sessions/{sid}/files?dir=input")).status_code == 404
        got = await intruder.get(f"/api/v1/sessions/{sid}/files/input/secret.csv")
        assert got.status_code == 404 and b"salary" not in got.content
        put = await intruder.post(
            f"/api/v1/sessions/{sid}/files", files={"file": ("secret.csv", b"overwritten")}
        )
        assert put.status_code == 404, put.text
    mine = await api.get(f"/api/v1/sessions/{sid}/files/input/secret.csv")
    assert mine.content == b"salary,100\n"


@pytest.mark.parametrize("who", ["nobody", "other-tenant"])
async def test_the_sandbox_internal_routes_want_the_callers_own_credential(
    stack: LocalStack, who: str
) -> None:
    path = "/internal/sessions/s-1/files"
    params = {"tenant_id": stack.tenant, "user_id": "dev", "dir": "output"}
    headers = (
        {} if who == "nobody"
        else stack.credentials.headers(f"tenant-{secrets.token_hex(4)}", "dev")
    )  # fmt: skip
    async with httpx.AsyncClient(base_url=stack.url("sandbox"), timeout=30) as raw:
        got = await raw.get(path, params=params, headers=headers)
        put = await raw.put(f"{path}/input/x.csv", params=params, headers=headers, content=b"x")
    want = 401 if who == "nobody" else 403
    assert got.status_code == want and put.status_code == want, (got.text, put.text)
