"""Approval events in session streams on the real Redis (SPEC H-02, H-03, issue 35 item
6): a pending prompt whose event Redis lost is shown again when the stream is opened,
without an SSE id and before the live events; an escalation of a waiting turn goes into
the stream at once (its turn has no ``complete`` to wait for). Memory's pending list is an
HTTP double of its route."""

from __future__ import annotations

import asyncio
import json
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import httpx
import pytest
from fastapi import FastAPI, HTTPException
from redis.asyncio import Redis
from weft_contracts import (
    ApprovalEscalated,
    ApprovalEscalatedData,
    CompleteData,
    CompleteEvent,
    ToolApprovalRequiredData,
    ToolApprovalRequiredEvent,
    ToolApprovalResolvedData,
    ToolApprovalResolvedEvent,
    TurnStartedData,
    TurnStartedEvent,
    TurnStatus,
)
from weft_contracts.envelope import Envelope
from weft_gateway.api import Gateway
from weft_gateway.approvals_client import ApprovalsClient
from weft_gateway.auth import Principal
from weft_gateway.fanout import StreamFanout
from weft_gateway.notices import NoticeProjector
from weft_gateway.pending_prompts import missing_from_stream
from weft_gateway.settings import GatewaySettings
from weft_gateway.sse_response import EventStreamResponse
from weft_gateway.streams import SessionStreams, stream_key
from weft_platform.bus import Logged


@dataclass
class Turn:
    tenant: str
    session: str
    request: str

    @property
    def ids(self) -> dict[str, str]:
        return {"tenant_id": self.tenant, "session_id": self.session, "request_id": self.request}

    def asked(self, prompt_id: str, seq: int) -> ToolApprovalRequiredEvent:
        return ToolApprovalRequiredEvent(
            **self.ids, seq=seq,
            data=ToolApprovalRequiredData(
                prompt_id=prompt_id, round=0, call_id=f"call_{prompt_id}",
                tool_name="web_search", risk="probe", arguments_digest="0" * 64,
                agent_id="a1", user_id="u1", timeout_s=600,
                expires_at=datetime.now(UTC) + timedelta(minutes=10),
            ),
        )  # fmt: skip

    def view(self, prompt_id: str) -> dict[str, Any]:
        """The prompt as memory's pending list shows it."""
        data = self.asked(prompt_id, 3).data.model_dump(mode="json")
        return {**data, "session_id": self.session, "request_id": self.request,
                "status": "pending", "event_id": f"evt_{prompt_id}"}  # fmt: skip


def _turn() -> Turn:
    token = secrets.token_hex(3)
    return Turn(f"t-appr-{token}", f"s-{token}", f"req_{token}")


async def _project(streams: SessionStreams, events: list[Envelope], first_offset: int) -> None:
    await streams.mark({0: 0})
    await streams.append_many([Logged(e, 0, first_offset + i) for i, e in enumerate(events)])


def _streams(redis: Redis, turn: Turn) -> SessionStreams:
    marks = f"weft:test:{turn.tenant}:marks"
    return SessionStreams(redis, max_len=1000, retention_s=120, marks_key=marks)


async def test_a_prompt_whose_event_the_stream_holds_is_not_sent_again(redis: Redis) -> None:
    """SPEC H-02: only prompts missing from the stream are shown again."""
    turn = _turn()
    streams = _streams(redis, turn)
    started = TurnStartedEvent(
        **turn.ids, seq=1, data=TurnStartedData(query="q", user_id="u1", agent_id="a1")
    )
    await _project(streams, [started, turn.asked("p1", 2)], first_offset=0)
    missing = await missing_from_stream(
        redis, turn.tenant, turn.session, [turn.view("p1"), turn.view("p2")]
    )
    assert [p["prompt_id"] for p in missing] == ["p2"]


class ListSink:
    """Collects what the stream writes."""

    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> bool:
        self.data += data
        return True


class Directory:
    async def lookup(self, tenant_id: str, session_id: str, *, user_id: str) -> None:
        return None


async def _gateway(redis: Redis, turn: Turn, pending: list[dict[str, Any]]) -> Gateway:
    app = FastAPI()

    @app.get("/internal/sessions/{session_id}/prompts")
    async def prompts(session_id: str, status: str, user_id: str) -> Any:
        if session_id != turn.session or user_id != "u1":
            raise HTTPException(404, "session not found")
        return {"prompts": pending}

    memory = ApprovalsClient("http://memory", "memory", transport=httpx.ASGITransport(app))
    unused: Any = None  # the resume path reads none of these
    return Gateway(
        settings=GatewaySettings(turn_idle_timeout_s=120, sse_ping_s=60),
        bus=unused, redis=redis, streams=_streams(redis, turn), fanout=StreamFanout(redis),
        memory=unused, directory=cast(Any, Directory()), agents=unused, limits=unused,
        knowledge=unused, prompts=memory,
    )  # fmt: skip


async def test_a_stream_redis_lost_shows_the_pending_prompt_then_the_live_turn(
    redis: Redis,
) -> None:
    """SPEC H-02/H-03: the session's stream is gone (Redis lost it) while a prompt waits:
    opening it answers (not 404), shows the prompt first without an id, then the turn's
    events as the projector writes them, to the turn's complete."""
    turn = _turn()
    who = Principal(tenant_id=turn.tenant, user_id="u1")
    gw = await _gateway(redis, turn, [turn.view("p1")])
    response = await gw.resume(who, turn.session, None, "native")
    assert isinstance(response, EventStreamResponse)
    sink = ListSink()
    run = asyncio.create_task(cast(Any, response)._run(sink))
    resolved = ToolApprovalResolvedEvent(
        **turn.ids, seq=4,
        data=ToolApprovalResolvedData(prompt_id="p1", call_id="call_p1", tool_name="web_search",
                                      outcome="approved", decided_by="u1"),
    )  # fmt: skip
    complete = CompleteEvent(**turn.ids, seq=9, data=CompleteData(status=TurnStatus.COMPLETED))
    await _project(gw.streams, [resolved, complete], first_offset=20)
    await asyncio.wait_for(run, 30)
    frames = [f for f in sink.data.decode().split("\r\n\r\n") if f.strip()]
    kinds = [next(line[7:] for line in f.split("\r\n") if line.startswith("event: "))
             for f in frames]  # fmt: skip
    assert kinds == ["tool_approval_required", "tool_approval_resolved", "complete"]
    assert not any(line.startswith("id:") for line in frames[0].split("\r\n"))
    assert "id: 21-0" in frames[1]
    shown = json.loads(next(x[6:] for x in frames[0].split("\r\n") if x.startswith("data: ")))
    assert shown["data"]["prompt_id"] == "p1" and "credential" not in shown
    await gw.fanout.aclose()


async def test_a_lost_stream_without_pending_prompts_is_still_404(redis: Redis) -> None:
    turn = _turn()
    gw = await _gateway(redis, turn, [])
    with pytest.raises(HTTPException) as err:
        await gw.resume(Principal(tenant_id=turn.tenant, user_id="u1"), turn.session, None)
    assert err.value.status_code == 404


async def test_an_escalation_of_a_waiting_turn_is_projected_at_once(redis: Redis) -> None:
    """Issue 35 item 6: approval_escalated is copied into the session stream like other
    notices, without waiting for a complete the waiting turn does not have."""
    turn = _turn()
    streams = _streams(redis, turn)
    started = TurnStartedEvent(
        **turn.ids, seq=1, data=TurnStartedData(query="q", user_id="u1", agent_id="a1")
    )
    await _project(streams, [started, turn.asked("p1", 2)], first_offset=0)
    notices = NoticeProjector(redis, max_len=1000, retention_s=120, wait_s=3600)
    escalated = ApprovalEscalated(
        **turn.ids,
        data=ApprovalEscalatedData(
            prompt_id="p1", call_id="call_p1", tool_name="web_search", risk="probe",
            arguments_digest="0" * 64, agent_id="a1", user_id="u1", approver_group="ops",
            expires_at=datetime.now(UTC) + timedelta(hours=1),
        ),
    )  # fmt: skip
    await asyncio.wait_for(notices.handle(escalated), 30)  # would wait an hour for a complete
    raw: Any = await redis.xrange(stream_key(turn.tenant, turn.session))
    types = [f[b"type"].decode() for _, f in raw]
    assert types == ["turn_started", "tool_approval_required", "approval_escalated"]
