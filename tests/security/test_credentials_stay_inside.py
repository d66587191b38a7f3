"""The turn credential never reaches a client, and a request credential that did leak
would open only its own user's data (docs/security.md "Credentials stay inside").

An attacker with an API key of the stack's tenant reads everything the public API hands
back about a turn: the SSE stream in both formats, the stream resumed with
``Last-Event-ID`` and from the turn's start, the message pages, the session pages, the
follow-up suggestions and the session's files. None of it may carry a ``credential`` field
or anything shaped like a JWT. Then, holding a request credential of user A (as if one
had leaked), the attacker calls memory's and the sandbox's ports directly: every route
whose user filter is optional answers A's data only, and names another user: 403.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import time
from datetime import datetime
from typing import Any

import httpx
import jwt
from weft_contracts import Topic
from weft_platform.topic_window import read_window
from weft_testkit import LocalStack

from tests.integration.kafka_helpers import kafka_access
from tests.stack_fixtures import ApiKeys, KeyedClient

JWT_SHAPE = re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}")
SKEW_S = 2.0
AGENT = "builtin-smart-reasoning"


def _assert_clean(where: str, text: str) -> None:
    """No credential field and no JWT-looking string in ``text``."""
    assert '"credential"' not in text, f"{where} carries a credential: {text[:400]}"
    found = JWT_SHAPE.search(text)
    assert found is None, f"{where} carries a token: {found.group(0)[:40]}..."


async def _raw_stream(
    client: KeyedClient, method: str, url: str, **kwargs: Any
) -> tuple[str, list[str], str | None]:
    """The raw text of an SSE response up to its ``complete`` event, the ids it gave and
    the request id header."""
    text, ids = "", []
    async with client.http.stream(method, url, timeout=120, **kwargs) as resp:
        assert resp.status_code == 200, await resp.aread()
        request_id = resp.headers.get("x-request-id")
        event = None
        async for line in resp.aiter_lines():
            text += line + "\n"
            if line.startswith("id:"):
                ids.append(line[3:].strip())
            if line.startswith("event:"):
                event = line[6:].strip()
            if line.startswith("data:") and (
                event == "complete" or (event == "message" and '"complete"' in line)
            ):
                break
    return text, ids, request_id


async def _session(client: KeyedClient) -> str:
    made = await client.http.post(
        "/api/v1/sessions", json={"title": "credentials", "agent_id": AGENT}
    )
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


async def test_nothing_a_client_receives_carries_a_credential(
    stack: LocalStack, api_keys: ApiKeys
) -> None:
    attacker = await api_keys.client(user=f"mallory-{secrets.token_hex(3)}")
    sid = await _session(attacker)
    chat = f"/api/v1/agent-chat/{sid}"
    text, ids, request_id = await _raw_stream(attacker, "POST", chat, json={"query": "hello there"})
    assert ids and request_id, text
    _assert_clean("the native SSE stream", text)
    weknora, _, _ = await _raw_stream(
        attacker, "POST", chat + "?format=weknora", json={"query": "and again"}
    )
    _assert_clean("the weknora SSE stream", weknora)
    stream = f"/api/v1/sessions/{sid}/stream"
    resumed, _, _ = await _raw_stream(attacker, "GET", stream, headers={"Last-Event-ID": ids[0]})
    assert resumed.count("\nid:") + resumed.startswith("id:") >= 1, resumed
    _assert_clean("the resumed stream", resumed)
    replayed, _, _ = await _raw_stream(attacker, "GET", stream)
    _assert_clean("the replayed turn", replayed)
    weknora_resumed, _, _ = await _raw_stream(
        attacker, "GET", stream + "?format=weknora", headers={"Last-Event-ID": ids[0]}
    )
    _assert_clean("the resumed weknora stream", weknora_resumed)

    pages = {
        "the message page": await attacker.http.get(f"/api/v1/sessions/{sid}/messages"),
        "the session page": await attacker.http.get(f"/api/v1/sessions/{sid}"),
        "the session list": await attacker.http.get("/api/v1/sessions"),
        "the files list": await attacker.http.get(f"/api/v1/sessions/{sid}/files"),
    }
    messages = pages["the message page"].json()
    items = messages["items"] if isinstance(messages, dict) else messages
    assistant = [m["id"] for m in items if m["role"] == "assistant"]
    assert assistant, messages
    pages["the suggestions"] = await _suggestions(attacker, sid, assistant[-1])
    for where, resp in pages.items():
        assert resp.status_code in (200, 409), (where, resp.status_code, resp.text)
        _assert_clean(where, resp.text)


async def _suggestions(client: KeyedClient, sid: str, message_id: str) -> httpx.Response:
    """The follow-ups of ``message_id``, once the suggestions service has read the end of
    its turn off agent.events (404 "message not found" until then)."""
    url = f"/api/v1/sessions/{sid}/suggestions"
    deadline = time.monotonic() + 60
    while True:
        got = await client.http.get(url, params={"assistant_message_id": message_id})
        if got.status_code != 404 or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.2)


async def test_the_turn_credential_expires_at_the_turns_deadline(
    stack: LocalStack, api_keys: ApiKeys, infra: dict[str, str]
) -> None:
    """Every subscriber of the turn's topics sees its credential: it must open nothing
    once the turn is over. The ChatRequested names the deadline; its credential's exp is
    no later (the engine ends the turn by then, see docs/engine.md "Turn deadline")."""
    since_ms = int(time.time() * 1000) - 1000
    user = await api_keys.client(user=f"u-{secrets.token_hex(3)}")
    sid = await _session(user)
    _, _, request_id = await _raw_stream(
        user, "POST", f"/api/v1/agent-chat/{sid}", json={"query": "hi"}
    )
    requests = await _records(infra, stack.prefix + Topic.AGENT_REQUESTS.value, since_ms,
                              request_id)  # fmt: skip
    assert len(requests) == 1, requests
    request = requests[0]
    deadline = datetime.fromisoformat(request["data"]["deadline"]).timestamp()
    claims = jwt.decode(request["credential"], options={"verify_signature": False})
    assert claims["exp"] <= deadline + SKEW_S, (claims, deadline)
    assert claims["exp"] > time.time(), claims  # it does cover the turn
    events = await _records(infra, stack.prefix + Topic.AGENT_EVENTS.value, since_ms,
                            request_id)  # fmt: skip
    assert events, "the turn's events were not on agent.events"
    for event in events:
        exp = jwt.decode(event["credential"], options={"verify_signature": False})["exp"]
        assert exp <= deadline + SKEW_S, (event["type"], exp, deadline)


async def _records(
    infra: dict[str, str], topic: str, since_ms: int, request_id: str | None
) -> list[dict[str, Any]]:
    """The records of ``topic`` since ``since_ms`` that belong to turn ``request_id``."""
    found: list[dict[str, Any]] = []

    async def keep(records: Any) -> None:
        for record in records:
            value = json.loads(record.value)
            if value.get("request_id") == request_id:
                found.append(value)

    await read_window(kafka_access(infra), topic, since_ms, keep)
    return found


async def _two_users(api_keys: ApiKeys) -> tuple[tuple[str, str], tuple[str, str]]:
    ann = await api_keys.client(user=f"ann-{secrets.token_hex(3)}")
    bob = await api_keys.client(user=f"bob-{secrets.token_hex(3)}")
    ann_sid, bob_sid = await _session(ann), await _session(bob)
    ann_user = (await ann.http.get(f"/api/v1/sessions/{ann_sid}")).json()["user_id"]
    bob_user = (await bob.http.get(f"/api/v1/sessions/{bob_sid}")).json()["user_id"]
    return (ann_user, ann_sid), (bob_user, bob_sid)


async def test_a_request_credential_without_a_user_filter_sees_only_its_user(
    stack: LocalStack, api_keys: ApiKeys
) -> None:
    """memory's session list: without user_id, the credential's user; with another's: 403."""
    (ann, ann_sid), (bob, bob_sid) = await _two_users(api_keys)
    tenant = stack.tenant
    as_ann = stack.credentials.headers(tenant, ann)
    async with httpx.AsyncClient(base_url=stack.url("memory"), timeout=30) as memory:
        listed = await memory.get(
            "/internal/sessions", params={"tenant_id": tenant, "limit": 100}, headers=as_ann
        )
        assert listed.status_code == 200, listed.text
        owners = {s["user_id"] for s in listed.json()}
        ids = {s["id"] for s in listed.json()}
        assert owners == {ann} and ann_sid in ids and bob_sid not in ids, listed.json()
        other = await memory.get(
            "/internal/sessions", params={"tenant_id": tenant, "user_id": bob}, headers=as_ann
        )
        assert other.status_code == 403, other.text


async def test_a_request_credential_reaches_no_other_users_session_by_id(
    stack: LocalStack, api_keys: ApiKeys
) -> None:
    """Routes that name no user (the engine's history and checkpoints, the sandbox's
    files) check the session is the credential's user's: another user's is 404, like a
    missing one; the own session is served."""
    (ann, ann_sid), (_, bob_sid) = await _two_users(api_keys)
    tenant = stack.tenant
    as_ann = stack.credentials.headers(tenant, ann)
    query = {"tenant_id": tenant}
    context = {"token_scale": 1.1}
    async with httpx.AsyncClient(base_url=stack.url("memory"), timeout=30) as memory:
        for sid, want in ((bob_sid, 404), (ann_sid, 200)):
            got = await memory.get(
                f"/internal/sessions/{sid}/history", params=query, headers=as_ann
            )
            assert got.status_code == want, (sid, got.text)
        put = await memory.put(
            f"/internal/sessions/{bob_sid}/turns/req_x/context",
            params=query, json=context, headers=as_ann,
        )  # fmt: skip
        assert put.status_code == 404 and "session" in put.text, put.text
    files = {"tenant_id": tenant, "user_id": ann, "dir": "input"}
    async with httpx.AsyncClient(base_url=stack.url("sandbox"), timeout=30) as sandbox:
        theirs = await sandbox.get(f"/internal/sessions/{bob_sid}/files", params=files,
                                   headers=as_ann)  # fmt: skip
        assert theirs.status_code == 404, theirs.text
        upload = await sandbox.put(
            f"/internal/sessions/{bob_sid}/files/input/planted.csv",
            params=files, headers=as_ann, content=b"a,b\n",
        )  # fmt: skip
        assert upload.status_code == 404, upload.text
        mine = await sandbox.get(f"/internal/sessions/{ann_sid}/files", params=files,
                                 headers=as_ann)  # fmt: skip
        assert mine.status_code in (200, 409), mine.text  # 409: no sandbox configured
