"""After Redis lost its data, requests that waited only in Redis (queued behind a running
turn) are read back from ``agent.requests`` and handed to the intake again, once, in log
order; requests that left a trace are not (ARCHITECTURE invariant 2, no request lost)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from fakeredis import FakeAsyncRedis
from weft_contracts import AgentConfig, ChatRequested, ChatRequestedData
from weft_engine.keys import completed_key, state_key
from weft_engine.requests_replay import LoggedRequest, RequestsReplay
from weft_engine.trails import TurnRef, TurnTrail

LOCK = "weft:test:requests-replayed"


def _request(rid: str) -> LoggedRequest:
    data = ChatRequestedData(query=rid, user_id="u", agent=AgentConfig(agent_id="a", model="m"))
    request = ChatRequested(tenant_id="t", session_id="s", request_id=rid, data=data)
    return LoggedRequest(request, datetime.now(UTC))


class _Trails:
    def __init__(self, seqs: dict[str, int]):
        self.seqs = seqs

    async def read(self, turns: Sequence[TurnRef]) -> dict[str, TurnTrail]:
        return {t.request_id: TurnTrail(self.seqs.get(t.request_id, 0)) for t in turns}


def _replay(redis: FakeAsyncRedis, logged: list[LoggedRequest], handled: list[str],
            trails: dict[str, int], *, fail: bool = False) -> RequestsReplay:  # fmt: skip
    async def requests(since: float) -> list[LoggedRequest]:
        if fail:
            raise TimeoutError("broker away")
        return logged

    async def handle(request: ChatRequested) -> None:
        handled.append(request.request_id)

    return RequestsReplay(redis=redis, requests=requests, trails=_Trails(trails),
                          handle=handle, window_s=600, lock_key=LOCK)  # fmt: skip


async def test_only_requests_without_a_trace_are_handed_over_again_once_in_order() -> None:
    redis = FakeAsyncRedis()
    logged = [_request(r) for r in ("started", "queued-1", "handled-since", "ran", "queued-2")]
    await redis.set(state_key("handled-since"), "{}")  # the consumer took it since the loss
    await redis.set(completed_key("ran"), "1")
    handled: list[str] = []
    replay = _replay(redis, logged, handled, trails={"started": 3})
    assert await replay(time.time()) == ["queued-1", "queued-2"]
    assert handled == ["queued-1", "queued-2"]
    assert await replay(time.time()) == [], "once per loss: the lock lives in the same Redis"
    await redis.flushdb()  # a second loss allows a second replay
    assert await _replay(redis, logged, [], trails={"started": 3})(time.time()) != []
    await redis.aclose()


async def test_a_replay_that_fails_is_tried_again_by_the_next_sweep() -> None:
    redis = FakeAsyncRedis()
    handled: list[str] = []
    with pytest.raises(TimeoutError):
        await _replay(redis, [_request("q")], handled, {}, fail=True)(time.time())
    assert not await redis.exists(LOCK)
    assert await _replay(redis, [_request("q")], handled, {})(time.time()) == ["q"]
    await redis.aclose()
