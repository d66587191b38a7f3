"""A turn ends by the deadline its request carries (the gateway counts it from the request
and the turn's credential expires then), or by the engine's own bound when that is
earlier (docs/engine.md "Turn deadline")."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from weft_contracts import ChatRequested

from tests.unit.test_engine_intake_opening import _Engine, _request, engine

__all__ = ["engine"]  # the fixture, shared with the opening tests


def _with_deadline(seconds: float) -> ChatRequested:
    request = _request()
    deadline = datetime.now(UTC) + timedelta(seconds=seconds)
    data = request.data.model_copy(update={"deadline": deadline})
    return request.model_copy(update={"data": data})


async def test_the_requests_earlier_deadline_is_the_turns(engine: _Engine) -> None:
    request = _with_deadline(300)  # the engine's own bound here is 1200 s
    await engine.intake.on_chat_requested(request)
    state = await engine.store.load("r1")
    assert state is not None and request.data.deadline is not None
    assert state.deadline_at == request.data.deadline.timestamp()


async def test_the_engines_bound_holds_when_the_request_allows_more(engine: _Engine) -> None:
    before = time.time()
    await engine.intake.on_chat_requested(_with_deadline(5000))
    state = await engine.store.load("r1")
    assert state is not None and before + 1200 <= state.deadline_at <= time.time() + 1200


async def test_a_request_without_a_deadline_gets_the_engines_bound(engine: _Engine) -> None:
    before = time.time()
    await engine.intake.on_chat_requested(_request())
    state = await engine.store.load("r1")
    assert state is not None and before + 1200 <= state.deadline_at <= time.time() + 1200
