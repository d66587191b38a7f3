"""Gateway rules without infrastructure: mode choice, SSE shapes, limits' inputs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import HTTPException
from redis.exceptions import RedisError
from weft_contracts import AgentConfig, AgentMode, ErrorCode, assistant_message_id
from weft_gateway.api import (
    AGENT_REQUIRED,
    ChatBody,
    Gateway,
    chat_mode,
    embedded_channel_mode,
    pick_agent_id,
)
from weft_gateway.auth import ApiKeyAuth
from weft_gateway.clients import AgentConfigClient
from weft_gateway.fanout import End, Follow, Outcome, Sink
from weft_gateway.settings import GatewaySettings
from weft_gateway.sse import frame, synthetic_failure, to_sse, weknora_event
from weft_gateway.sse_response import EventStreamResponse
from weft_gateway.streams import StreamEntry, parse_position
from weft_platform.credentials import GATEWAY, ensure_dev_keys, load_signer, load_verifier
from weft_platform.internal_auth import outbound_credential


def _agent(mode: AgentMode) -> AgentConfig:
    return AgentConfig(agent_id="a", model="m", mode=mode)


def _envelope(event_type: str, data: dict[str, object]) -> dict[str, object]:
    return {
        "id": "evt_1", "type": event_type, "request_id": "req_1", "session_id": "s1",
        "data": data,
    }  # fmt: skip


# SPEC C-02
def test_agent_mode_without_agent_is_the_exact_400() -> None:
    with pytest.raises(HTTPException) as err:
        pick_agent_id(True, None, None)
    assert err.value.status_code == 400
    assert err.value.detail == AGENT_REQUIRED == "agent_id is required when agent mode is enabled"


def test_agent_choice_request_then_session_then_quick_answer() -> None:  # SPEC C-02
    assert pick_agent_id(True, "a1", "a2") == "a1"
    assert pick_agent_id(True, None, "a2") == "a2"
    assert pick_agent_id(False, None, None) == "builtin-quick-answer"


def test_agent_mode_wins_and_quick_answer_is_downgraded() -> None:  # SPEC C-02
    assert chat_mode(_agent(AgentMode.SMART_REASONING)) == "agent"
    assert chat_mode(_agent(AgentMode.QUICK_ANSWER)) == "normal"


def test_embedded_channel_rule() -> None:  # SPEC C-03
    assert embedded_channel_mode(True, "agt_1") == "agent"
    assert embedded_channel_mode(True, "builtin-quick-answer") == "normal"
    assert embedded_channel_mode(False, "agt_1") == "normal"


def test_double_texting_field() -> None:
    assert ChatBody(query="q").double_texting == "enqueue"
    assert ChatBody(query="q", double_texting="reject").double_texting == "reject"
    with pytest.raises(ValueError):
        ChatBody.model_validate({"query": "q", "double_texting": "later"})


def test_native_event_has_id_event_and_json_data() -> None:  # invariant 1, SPEC C-05
    raw = json.dumps(_envelope("thought", {"round": 0, "delta": "hm"}))
    event = to_sse(StreamEntry(entry_id="5-1", type="thought", request_id="r", event_json=raw))
    assert event is not None
    assert (event.id, event.event, event.data) == ("5-1", "thought", raw)


def test_synthetic_failure_is_error_then_failed_complete() -> None:  # invariant 2
    events = synthetic_failure(
        tenant_id="t",
        session_id="s",
        request_id="req_1",
        position="9-0",
        code=ErrorCode.STREAM_IDLE_TIMEOUT,
        message="silent",
    )
    assert [e.event for e in events] == ["error", "complete"]
    assert all(e.id == "9-0" for e in events)
    error, complete = (json.loads(str(e.data)) for e in events)
    assert error["data"]["code"] == "stream_idle_timeout" and error["request_id"] == "req_1"
    assert complete["data"]["status"] == "failed"


def test_weknora_projection() -> None:
    thought = weknora_event("1-0", _envelope("thought", {"round": 0, "delta": "x", "done": False}))
    assert thought is not None and thought.event == "message" and thought.id == "1-0"
    body = json.loads(str(thought.data))
    assert (body["id"], body["response_type"], body["content"], body["done"]) == (
        "req_1",
        "thinking",
        "x",
        False,
    )
    answer = _weknora_body("2-0", _envelope("final_answer", {"delta": "y"}))
    assert answer["response_type"] == "answer" and answer["content"] == "y"
    refs = _envelope("references", {"references": [{"alias": "c1"}]})
    refs_body = _weknora_body("3-0", refs)
    assert refs_body["knowledge_references"] == [{"alias": "c1"}] and refs_body["done"]
    done = _weknora_body("4-0", _envelope("complete", {"status": "completed"}))
    assert done["response_type"] == "complete" and done["done"] is True
    assert weknora_event("0-2", _envelope("context_compacted", {})) is None


def test_weknora_superseded_answer_marker_is_not_the_answers_end() -> None:
    """SPEC E-13: the marker closing a steered round is an empty, not-done answer message
    that carries ``superseded`` for clients that restart the answer there."""
    data = {"round": 0, "delta": "", "done": True, "superseded": True}
    body = json.loads(str(weknora_event("5-0", _envelope("final_answer", data)).data))  # type: ignore[union-attr]
    assert (body["response_type"], body["content"], body["done"]) == ("answer", "", False)
    assert body["data"]["superseded"] is True
    end = {"round": 1, "delta": "", "done": True, "superseded": False}
    assert json.loads(str(weknora_event("6-0", _envelope("final_answer", end)).data))["done"]  # type: ignore[union-attr]


def test_weknora_stream_opens_with_agent_query() -> None:
    """The reference stream starts with ``agent_query``: done, no content, the session and
    the assistant message id (memory's id for the turn's answer), and not the native
    turn_started payload (query, user, agent)."""
    started = _envelope("turn_started", {"query": "q", "user_id": "u", "agent_id": "a"})
    body = _weknora_body("0-1", started)
    assert body == {
        "id": "req_1", "session_id": "s1", "response_type": "agent_query", "content": "",
        "done": True, "assistant_message_id": "evt_1a",
        "data": {"session_id": "s1", "assistant_message_id": assistant_message_id("evt_1")},
    }  # fmt: skip


def test_weknora_synthetic_failure() -> None:
    events = synthetic_failure(
        tenant_id="t", session_id="s", request_id="r", position="1-0", message="m",
        code=ErrorCode.STREAM_UNAVAILABLE,
        fmt="weknora",
    )  # fmt: skip
    kinds = [json.loads(str(e.data))["response_type"] for e in events]
    assert kinds == ["error", "complete"]


def test_stream_positions_compare_numerically() -> None:
    assert parse_position("10-0") > parse_position("9-99")
    assert parse_position("5-2") > parse_position("5-1")


class _Row:
    tenant_id, user_id, knowledge_base_ids = "t1", "u1", None
    scopes: list[str] | None = None


class _FakeDb:
    """Stands in for the session factory: counts key lookups (unit test, no database)."""

    def __init__(self) -> None:
        self.queries = 0

    def __call__(self) -> _FakeDb:
        return self

    async def __aenter__(self) -> _FakeDb:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def scalar(self, stmt: object) -> _Row | None:
        self.queries += 1
        await asyncio.sleep(0.01)
        return _Row() if "key_hash" in str(stmt) else None

    async def execute(self, stmt: object) -> _Found:
        """The key and its tenant's status (None: a tenant without a row)."""
        return _Found(await self.scalar(stmt))


class _Found:
    def __init__(self, row: _Row | None) -> None:
        self._row = row

    def first(self) -> tuple[_Row, str | None] | None:
        return None if self._row is None else (self._row, None)


class _Req:
    def __init__(self, key: str) -> None:
        self.headers = {"authorization": f"Bearer {key}"}


async def test_api_key_lookups_are_shared_and_cached() -> None:
    db = _FakeDb()
    auth = ApiKeyAuth(db, cache_s=60)  # type: ignore[arg-type]
    principals = await asyncio.gather(*(auth(_Req("k1")) for _ in range(200)))  # type: ignore[arg-type]
    assert {p.tenant_id for p in principals} == {"t1"}
    assert db.queries == 1  # a connect burst costs one query, not 200
    await auth(_Req("k1"))  # type: ignore[arg-type]
    assert db.queries == 1
    with pytest.raises(HTTPException) as err:
        await auth(_Req(""))  # type: ignore[arg-type]
    assert err.value.status_code == 401


def test_frame_is_encoded_once_and_shared() -> None:  # SPEC C-05
    raw = json.dumps(_envelope("thought", {"delta": "hi"}), separators=(",", ":"))
    entry = StreamEntry(entry_id="7-0", type="thought", request_id="r", event_json=raw)
    first = frame(entry, "native")
    assert first == f"id: 7-0\r\nevent: thought\r\ndata: {raw}\r\n\r\n".encode()
    assert frame(entry, "native") is first  # every client of the session gets these bytes
    weknora = frame(entry, "weknora")
    assert weknora is not None and weknora.startswith(b"id: 7-0\r\nevent: message\r\n")
    assert frame(entry, "weknora") is weknora
    assert frame(StreamEntry(entry_id="8-0", type="context_compacted", request_id="r",
                             event_json=json.dumps(_envelope("context_compacted", {}))),
                 "weknora") is None  # fmt: skip


async def test_stuck_client_is_dropped_after_send_timeout_and_its_stream_closed() -> None:
    """A client that stops reading (send never completes): its buffer fills, the fan-out
    is told to drop it, and the response ends after ``send_timeout_s`` (invariant 6)."""
    refused = asyncio.Event()

    async def run(sink: Sink) -> bytes:
        for _ in range(10_000):  # one event per loop turn, as the fan-out writes them
            if not sink.write(b"data: x\r\n\r\n"):
                refused.set()  # the fan-out ends this subscriber: End.DROPPED
                break
            await asyncio.sleep(0)
        return b""

    sends: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sends.append(message)
        if len(sends) == 3:
            await asyncio.Event().wait()  # the socket buffer is full from here on

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()
        return {}

    response = EventStreamResponse(run, send_timeout_s=0.2, buffer_bytes=4096)
    await asyncio.wait_for(response({"type": "http", "method": "GET"}, receive, send), 5)
    assert refused.is_set()
    assert len(sends) == 3 and sends[0]["type"] == "http.response.start"


async def test_disconnect_ends_the_response_and_its_stream() -> None:
    stopped = asyncio.Event()

    async def run(sink: Sink) -> bytes:
        try:
            while True:
                await asyncio.sleep(0.01)
                sink.write(b": ping\r\n\r\n")
        finally:
            stopped.set()  # the fan-out's stream() is cancelled: it unsubscribes

    async def send(message: MutableMapping[str, Any]) -> None:
        return None

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(0.1)
        return {"type": "http.disconnect"}

    response = EventStreamResponse(run, send_timeout_s=5, buffer_bytes=4096)
    await asyncio.wait_for(response({"type": "http", "method": "GET"}, receive, send), 5)
    assert stopped.is_set()


async def test_buffered_sink_sends_what_piled_up_as_one_message_then_the_trailer() -> None:
    """Without a direct transport (not uvicorn httptools), frames written while the
    writer was busy go out together, and the trailer ends the body."""

    async def run(sink: Sink) -> bytes:
        assert sink.write(b"a") and sink.write(b"b") and sink.write(b"c")
        await asyncio.sleep(0.05)
        return b"end"

    sends: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sends.append(message)

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()
        return {}

    response = EventStreamResponse(run, send_timeout_s=5, buffer_bytes=4096)
    await asyncio.wait_for(response({"type": "http", "method": "GET"}, receive, send), 5)
    bodies = [(m["body"], m["more_body"]) for m in sends[1:]]
    assert bodies == [(b"abc", True), (b"end", False)]


def test_openapi_documents_the_sse_routes_as_event_streams() -> None:
    """/openapi.json is published and names text/event-stream for the chat and
    stream routes; building it must not fail on the SSE response class."""
    from weft_gateway.app import create_app

    document = create_app().openapi()
    for path, method in (
        ("/api/v1/sessions/{session_id}/stream", "get"),
        ("/api/v1/agent-chat/{session_id}", "post"),
        ("/api/v1/knowledge-chat/{session_id}", "post"),
    ):
        ok = document["paths"][path][method]["responses"]["200"]
        assert "text/event-stream" in ok["content"]


async def test_a_later_agent_configs_fields_are_ignored_not_a_failed_request() -> None:
    """Rolling deploys (weft_contracts.compat): agent-config upgraded before the gateway
    answers with fields the gateway does not know; the chat request still goes on."""
    later = {**AgentConfig(agent_id="a", model="m").model_dump(mode="json"), "added_later": 1}

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/internal/resolve"
        return httpx.Response(200, json=later)

    client = AgentConfigClient(
        "http://agent-config", "agent-config", transport=httpx.MockTransport(answer)
    )
    config = await client.resolve("t", "a", None)
    assert config == AgentConfig(agent_id="a", model="m")


def _weknora_body(entry_id: str, envelope: dict[str, Any]) -> Any:
    """The JSON body of the WeKnora event an envelope maps to (it must map to one)."""
    event = weknora_event(entry_id, envelope)
    assert event is not None, envelope
    return json.loads(str(event.data))


class _ScopedRow(_Row):
    scopes = ["approvals:decide"]


class _ScopedDb(_FakeDb):
    async def scalar(self, stmt: object) -> _Row | None:
        return _ScopedRow()


async def test_a_keys_scopes_reach_the_principal_and_the_request_credential(
    tmp_path: Path,
) -> None:
    """SPEC H-04: approvals:decide travels with the key's calls (claim scp), where memory
    reads it; a plain key's credential has none."""
    ensure_dev_keys(tmp_path, [GATEWAY])
    signer = load_signer(tmp_path, GATEWAY)
    for db, expected in ((_ScopedDb(), {"approvals:decide"}), (_FakeDb(), set())):
        auth = ApiKeyAuth(db, cache_s=0, signer=signer)  # type: ignore[arg-type]
        principal = await auth(_Req("k1"))  # type: ignore[arg-type]
        assert principal.scopes == expected
        token = outbound_credential.get()
        assert token is not None
        assert load_verifier(tmp_path).verify_request(token, "memory").scopes == expected


class _FlakyFanout:
    """A fan-out whose stream store fails ``failures`` times before it answers."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def stream(self, follow: Any, sink: Any) -> Outcome:
        self.calls += 1
        if self.calls <= self.failures:
            raise RedisError("LOADING Redis is loading the dataset in memory")
        return Outcome(End.COMPLETE, "9-0", follow.request_id)


async def test_a_stream_opened_while_redis_restarts_waits_for_it() -> None:
    """Issue 34's full fault run: a client that (re)joins while Redis restarts waits for
    it (``stream_store_wait_s``) instead of getting a ``stream_unavailable`` end it takes
    for its turn's; past the wait it does get that end."""
    follow = Follow(tenant_id="t", session_id="s", after="0-0", request_id="r",
                    idle_timeout_s=10)  # fmt: skip
    waiting = Gateway.__new__(Gateway)
    waiting.settings = GatewaySettings(stream_store_wait_s=5)
    waiting.fanout = _FlakyFanout(failures=2)  # type: ignore[assignment]
    assert (await waiting._follow(follow, None)).end is End.COMPLETE  # type: ignore[arg-type]
    impatient = Gateway.__new__(Gateway)
    impatient.settings = GatewaySettings(stream_store_wait_s=0)
    impatient.fanout = _FlakyFanout(failures=2)  # type: ignore[assignment]
    assert (await impatient._follow(follow, None)).end is End.UNAVAILABLE  # type: ignore[arg-type]
