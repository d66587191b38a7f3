"""Session notices in the session's stream (SPEC Q-01, ARCHITECTURE "Topics"): the gateway's
notices projector on the real Redis, next to the agent events' projector.

A ``suggestions_ready`` takes the successor of the stream's newest id, lands after its
turn's ``complete`` even when the agent events' projector lags, is written once however
often it is delivered, and never takes an id an agent event has or will have, so
``Last-Event-ID`` resumes and a rebuild after Redis lost the streams keep their meaning."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from weft_contracts import (
    CompleteData,
    CompleteEvent,
    SuggestionsReady,
    SuggestionsReadyData,
    ThoughtData,
    ThoughtEvent,
    TurnStartedData,
    TurnStartedEvent,
    TurnStatus,
)
from weft_contracts.envelope import Envelope
from weft_gateway.notices import NoticeAppended, NoticeProjector
from weft_gateway.streams import SessionStreams, parse_position, stream_key
from weft_platform.bus import Logged


class Session:
    """One session's turn, its stream and its notices projector."""

    def __init__(self, redis: Redis):
        self.redis = redis
        self.tenant = "t-notice-" + secrets.token_hex(3)
        self.session = "s-" + secrets.token_hex(3)
        self.request = "r-" + secrets.token_hex(3)
        self.streams = SessionStreams(
            redis, max_len=1000, retention_s=120, marks_key=f"weft:test:{self.tenant}:marks"
        )
        self.notices = NoticeProjector(redis, max_len=1000, retention_s=120, wait_s=30)

    def turn(self) -> list[Envelope]:
        ids = {"tenant_id": self.tenant, "session_id": self.session, "request_id": self.request}
        return [
            TurnStartedEvent(
                **ids, seq=1, data=TurnStartedData(query="q", user_id="u", agent_id="a")
            ),
            ThoughtEvent(**ids, seq=2, data=ThoughtData(round=0, delta="hm")),
            CompleteEvent(**ids, seq=3, data=CompleteData(status=TurnStatus.COMPLETED)),
        ]

    def notice(self) -> SuggestionsReady:
        return SuggestionsReady(
            tenant_id=self.tenant,
            session_id=self.session,
            request_id=self.request,
            data=SuggestionsReadyData(
                assistant_message_id="m1a", placement="follow_up", locale="en", state="ready"
            ),
        )

    async def project(self, events: Sequence[Envelope], first_offset: int) -> None:
        logged = [Logged(e, 0, first_offset + i) for i, e in enumerate(events)]
        await self.streams.mark({0: 0})
        await self.streams.append_many(logged)

    async def entries(self) -> list[tuple[str, str]]:
        raw: Any = await self.redis.xrange(stream_key(self.tenant, self.session))
        return [(i.decode(), f[b"type"].decode()) for i, f in raw]


async def test_a_notice_follows_the_complete_with_the_successor_id(redis: Redis) -> None:
    s = Session(redis)
    await s.project(s.turn(), first_offset=41)
    await s.notices.handle(s.notice())
    assert await s.entries() == [
        ("42-0", "turn_started"),
        ("43-0", "thought"),
        ("44-0", "complete"),
        ("44-1", "suggestions_ready"),
    ]


async def test_a_redelivered_notice_is_written_once(redis: Redis) -> None:
    s = Session(redis)
    await s.project(s.turn(), first_offset=0)
    notice = s.notice()
    assert await s.notices.append(notice) is NoticeAppended.WRITTEN
    assert await s.notices.append(notice) is NoticeAppended.KNOWN
    assert [t for _, t in await s.entries()].count("suggestions_ready") == 1


async def test_a_notice_waits_for_a_lagging_complete(redis: Redis) -> None:
    s = Session(redis)
    started, thought, complete = s.turn()
    await s.project([started, thought], first_offset=9)
    waiting = asyncio.create_task(s.notices.handle(s.notice()))
    await asyncio.sleep(0.3)  # the notice is there before its turn's complete
    assert not waiting.done()
    assert [t for _, t in await s.entries()] == ["turn_started", "thought"]
    await s.project([complete], first_offset=11)
    await asyncio.wait_for(waiting, 30)
    assert [t for _, t in await s.entries()] == [
        "turn_started",
        "thought",
        "complete",
        "suggestions_ready",
    ]


async def test_later_events_and_a_rebuild_keep_ids_comparable(redis: Redis) -> None:
    s = Session(redis)
    first = s.turn()
    await s.project(first, first_offset=0)
    await s.notices.handle(s.notice())
    notice_id = (await s.entries())[-1][0]
    assert notice_id == "3-1"
    s.request = "r2-" + secrets.token_hex(3)
    second = s.turn()
    await s.project(second, first_offset=3)
    assert await _ids_after(redis, stream_key(s.tenant, s.session), notice_id) == [
        "4-0",
        "5-0",
        "6-0",
    ]

    # Redis lost the streams: the log is written again (unguarded) under the same ids;
    # a client resuming from the notice's id gets exactly the events after it.
    key = stream_key(s.tenant, s.session)
    await redis.delete(key, key + ":seq")
    logged = [Logged(e, 0, i) for i, e in enumerate([*first, *second])]
    await s.streams.append_many(logged, guarded=False)
    assert await _ids_after(redis, key, notice_id) == ["4-0", "5-0", "6-0"]
    assert all(parse_position(i)[1] == 0 for i, _ in await s.entries())


async def _ids_after(redis: Redis, key: str, position: str) -> list[str]:
    raw: Any = await redis.xrange(key, min=f"({position}")
    return [i.decode() for i, _ in raw]
