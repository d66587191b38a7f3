"""The follow-up generator on the real PostgreSQL with the scripted LLM test double over
HTTP (SPEC Q-01..Q-04): one claim per set among replicas, a crashed generator's set taken
over once its lease passes, the lost lease's outcome discarded, the whole path from a
turn's events to a stored set through the real ``openai`` client, and click attribution
(SPEC Q-05)."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import (
    CompleteData,
    CompleteEvent,
    TurnStartedData,
    TurnStartedEvent,
    TurnStatus,
    assistant_message_id,
)
from weft_llm import OpenAIChatModel
from weft_storage.suggestions.models import MessageSuggestionSet, SuggestionEvent
from weft_suggestions.config import FixedConfigs, FollowUpConfig
from weft_suggestions.generation import FollowUpGenerator
from weft_suggestions.lease import SetKey, SuggestionLease
from weft_suggestions.turns import TurnLog
from weft_suggestions.worker import SuggestionWorker
from weft_testkit import chat_requests

QUESTION = "What does the Pro plan cost?"
CONFIG = FollowUpConfig(enabled=True, mode="generated", count=3)


def _key(tenant: str, message: str) -> SetKey:
    return SetKey(
        tenant_id=tenant,
        assistant_message_id=message,
        placement="follow_up",
        config_hash=CONFIG.config_hash(),
        locale="en",
    )


async def _eventually(check: Callable[[], Awaitable[bool]]) -> None:
    """Poll ``check`` up to 20 s; fails the test when it never holds."""
    for _ in range(400):
        if await check():
            return
        await asyncio.sleep(0.05)
    pytest.fail("the condition never held within 20 s")


@pytest.fixture(scope="module")
def migrated(own_database: str) -> str:
    """This module's sets live in a database of its own: the suggestions replicas of the
    test stacks running meanwhile sweep every expired follow-up set of their database and
    would take over the "crashed" set before this module's survivor can."""
    return own_database


@pytest.fixture
def tenant() -> str:
    return "t-sugg-" + secrets.token_hex(4)


async def test_two_generators_one_set(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:  # SPEC Q-04
    """Replicas racing for the same set: exactly one claim wins, however many try."""
    replicas = [SuggestionLease(sessions, lease_s=60) for _ in range(2)]
    key = _key(tenant, "m-race-a")
    claims = await asyncio.gather(
        *[
            replicas[i % 2].claim(key, session_id="s", request_id="r", config=CONFIG)
            for i in range(20)
        ]
    )
    won = [c for c in claims if c is not None]
    assert len(won) == 1
    assert await replicas[1].finish(won[0], "ready", [])
    # A finished set is not generated again, unless a regeneration asks for it.
    assert await replicas[0].claim(key, session_id="s", request_id="r", config=CONFIG) is None
    again = await replicas[0].claim(
        key, session_id="s", request_id="r", config=CONFIG, regenerate=True
    )
    assert again is not None


async def test_a_crashed_generators_set_is_taken_over_after_its_lease(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:  # SPEC Q-04
    crashed, survivor = SuggestionLease(sessions, lease_s=0.5), SuggestionLease(sessions, 60)
    key = _key(tenant, "m-crash-a")
    first = await crashed.claim(key, session_id="s", request_id="r", config=CONFIG)
    assert first is not None
    # While the lease is live nobody else gets the set (a long lease: not timing-bound).
    holder = await SuggestionLease(sessions, 60).claim(
        _key(tenant, "m-live-a"), session_id="s", request_id="r", config=CONFIG
    )
    assert holder is not None
    live = _key(tenant, "m-live-a")
    assert await survivor.claim(live, session_id="s", request_id="r", config=CONFIG) is None

    taken: list[object] = []

    async def took_over() -> bool:
        claim = await survivor.claim(key, session_id="s", request_id="r", config=CONFIG)
        if claim is not None:
            taken.append(claim)
        return claim is not None

    await _eventually(took_over)
    # The crashed generator comes back late: its outcome is refused, the survivor's kept.
    assert not await crashed.renew(first)
    assert not await crashed.finish(first, "ready", [{"id": "late"}])
    assert await survivor.finish(taken[0], "ready", [])  # type: ignore[arg-type]


@pytest.fixture
async def llm(scripted_llm: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=scripted_llm) as client:
        yield client


def _worker(
    sessions: async_sessionmaker[AsyncSession], scripted_llm: str, lease_s: float = 60
) -> tuple[SuggestionWorker, OpenAIChatModel]:
    model = OpenAIChatModel(base_url=scripted_llm + "/v1", api_key="scripted-llm-test-double")
    worker = SuggestionWorker(
        turns=TurnLog(sessions),
        lease=SuggestionLease(sessions, lease_s),
        configs=FixedConfigs(CONFIG),
        generator=FollowUpGenerator(model, "weft-scripted"),
        bus=None,
        locale="en",
        concurrency=4,
        sweep_interval_s=3600,
    )
    return worker, model


def _turn(
    tenant: str, session: str, locale: str | None = None
) -> list[TurnStartedEvent | CompleteEvent]:
    request = "req-" + secrets.token_hex(4)
    started = TurnStartedEvent(
        tenant_id=tenant,
        session_id=session,
        request_id=request,
        data=TurnStartedData(query=QUESTION, user_id="u1", agent_id="a1", locale=locale),
    )
    complete = CompleteEvent(
        tenant_id=tenant,
        session_id=session,
        request_id=request,
        data=CompleteData(status=TurnStatus.COMPLETED, final_answer="It costs 20 euros."),
    )
    return [started, complete]


async def _set(sessions: async_sessionmaker[AsyncSession], key: SetKey) -> MessageSuggestionSet:
    async with sessions() as s:
        row = await s.get(
            MessageSuggestionSet,
            (key.tenant_id, key.assistant_message_id, key.placement, key.config_hash, key.locale),
        )
    assert row is not None
    return row


async def test_replicas_given_the_same_turn_ask_the_model_once(
    sessions: async_sessionmaker[AsyncSession],
    scripted_llm: str,
    llm: httpx.AsyncClient,
    tenant: str,
) -> None:  # SPEC
    """Both replicas see the turn (a redelivery after a rebalance); one model call, one
    stored set, and the user's own question filtered out of it."""
    content = f'[{{"text": "{QUESTION}"}}, {{"text": "Is there a yearly plan?"}}]'
    script = {"steps": [{"content": content}], "fallback": "error"}
    assert (await llm.post("/_script", json=script)).status_code == 200
    events = _turn(tenant, "ses-" + secrets.token_hex(3))
    replicas = [_worker(sessions, scripted_llm) for _ in range(2)]
    try:
        await asyncio.gather(*[w.on_events(events) for w, _ in replicas])
        for w, _ in replicas:
            await w.idle()
    finally:
        for _, model in replicas:
            await model.aclose()
    key = _key(tenant, assistant_message_id(events[0].id))
    row = await _set(sessions, key)
    assert row.state == "ready"
    assert [q["text"] for q in row.questions] == ["Is there a yearly plan?"]
    assert row.generations == 1
    asked = (await llm.get("/_requests")).json()["requests"]
    assert len(asked) == 1


async def test_the_sweeper_finishes_a_set_whose_generator_died(
    sessions: async_sessionmaker[AsyncSession],
    scripted_llm: str,
    llm: httpx.AsyncClient,
    tenant: str,
) -> None:  # SPEC Q-04
    """A replica claimed the set and died before generating: once the lease has passed,
    another replica's sweeper generates it (nothing lost with the offset committed)."""
    script = {"steps": [{"content": '["How do I upgrade?"]'}], "fallback": "error"}
    assert (await llm.post("/_script", json=script)).status_code == 200
    events = _turn(tenant, "ses-" + secrets.token_hex(3))
    dead, dead_model = _worker(sessions, scripted_llm, lease_s=0.5)
    survivor, model = _worker(sessions, scripted_llm)
    try:
        await TurnLog(sessions).record(events)  # what its batch handler did before it died
        assert await dead.claim_follow_ups(tenant, events[0].request_id) is not None
        key = _key(tenant, assistant_message_id(events[0].id))

        async def swept() -> bool:
            return await survivor.sweep() > 0

        await _eventually(swept)
        await survivor.idle()
    finally:
        await model.aclose()
        await dead_model.aclose()
    row = await _set(sessions, key)
    assert (row.state, [q["text"] for q in row.questions]) == ("ready", ["How do I upgrade?"])


async def test_a_click_is_attributed_to_the_next_user_message(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:  # SPEC Q-05
    """A click waits for the session's next ``turn_started``, whose user message it is then
    attributed to; another session's turn does not take it."""
    turns = TurnLog(sessions)
    session = "ses-" + secrets.token_hex(3)
    first = _turn(tenant, session)
    await turns.record(first)
    message = assistant_message_id(first[0].id)
    click = SuggestionEvent(
        id="ev-" + secrets.token_hex(6),
        tenant_id=tenant,
        session_id=session,
        user_id="u1",
        assistant_message_id=message,
        placement="follow_up",
        question_id="g0",
        kind="click",
    )
    async with sessions.begin() as s:
        s.add(click)
    await turns.record(_turn(tenant, "ses-elsewhere")[:1])
    async with sessions() as s:
        assert (await s.get(SuggestionEvent, click.id)).attributed_message_id is None  # type: ignore[union-attr]
    following = _turn(tenant, session)
    await turns.record(following[:1])
    async with sessions() as s:
        stored = await s.get(SuggestionEvent, click.id)
    assert stored is not None and stored.attributed_message_id == following[0].id


async def test_a_turn_in_another_locale_gets_its_own_set(
    sessions: async_sessionmaker[AsyncSession],
    scripted_llm: str,
    llm: httpx.AsyncClient,
    tenant: str,
) -> None:  # SPEC Q-04: the set's key holds the locale the user's request named
    script = {"steps": [{"content": '["Y a-t-il un forfait annuel ?"]'}], "fallback": "error"}
    assert (await llm.post("/_script", json=script)).status_code == 200
    events = _turn(tenant, "ses-" + secrets.token_hex(3), locale="fr-CA")
    worker, model = _worker(sessions, scripted_llm)
    try:
        await worker.on_events(events)
        await worker.idle()
    finally:
        await model.aclose()
    turn = await TurnLog(sessions).turn(tenant, events[0].request_id)
    assert turn is not None and turn.locale == "fr-CA"
    key = _key(tenant, assistant_message_id(events[0].id))
    row = await _set(sessions, dataclasses.replace(key, locale="fr-CA"))
    assert [q["text"] for q in row.questions] == ["Y a-t-il un forfait annuel ?"]
    (asked,) = await chat_requests(llm)
    assert "locale fr-CA" in asked["messages"][0]["content"]
