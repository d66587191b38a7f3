"""memory's prompt timer on the real PostgreSQL and Kafka (SPEC H-02, H-03): a prompt
fires after its time, also when the timer restarted meanwhile; two timers fire a prompt
once (``FOR UPDATE SKIP LOCKED``); escalation, then the final timeout; the messages carry
memory's own credential, which the engine's record check accepts."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import AgentControl, SessionNotice, Topic
from weft_memory.app import ISSUER
from weft_memory.prompt_timer import PromptTimer
from weft_memory.recorder import RECORDED_TYPES, MessageRecorder
from weft_memory.renewal import RENEW_ROUTE, RENEW_SCOPE, TurnCredentialRenewer
from weft_platform.credentials import RECORDS, CredentialVerifier, load_signer, load_verifier
from weft_platform.record_credentials import RecordCheck, record_scope
from weft_platform.runtime import ServiceRuntime
from weft_storage.memory.models_approvals import AgentPrompt
from weft_testkit.credentials import DevCredentials, credentials_dir

from tests.integration.approval_rows import Turn, required
from tests.integration.kafka_helpers import dead_letters, records_so_far, service_runtime

WAIT_S = 20.0
"""Longest wait for a condition (a timer fires within ~1 s of its time here)."""


@pytest.fixture
async def rt(infra: dict[str, str], own_database: str) -> AsyncIterator[ServiceRuntime]:
    """A memory runtime on topics and a database of its own, broker started."""
    env = {**infra, "WEFT_DATABASE_URL": own_database}
    async with service_runtime(env, "memory-timer", start=True) as runtime:
        yield runtime


def _timer(rt: ServiceRuntime, renewer: TurnCredentialRenewer | None = None) -> PromptTimer:
    signer = load_signer(credentials_dir(), ISSUER)

    def own(topic: Topic, scope: str) -> str:
        return signer.service(RECORDS, [record_scope(topic), scope])

    gateway = renewer or TurnCredentialRenewer(
        "http://127.0.0.1:1", lambda: signer.service("gateway", [RENEW_SCOPE])
    )
    return PromptTimer(
        sessions=rt.sessions, bus=rt.bus, renewer=gateway, own_credential=own, poll_s=0.2
    )


async def _row(sessions: async_sessionmaker[AsyncSession], prompt_id: str) -> AgentPrompt:
    async with sessions() as s:
        row = await s.get(AgentPrompt, prompt_id)
    assert row is not None
    return row


async def _until(check: Callable[[], Any], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not await check():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        await asyncio.sleep(0.05)


async def _messages(rt: ServiceRuntime, topic: Topic, prompt_ids: set[str]) -> list[Any]:
    """The decoded records of ``topic`` about ``prompt_ids``."""
    model: TypeAdapter[Any] = TypeAdapter(
        AgentControl if topic == Topic.AGENT_CONTROL else SessionNotice
    )
    raw = await records_so_far(rt.settings, [rt.bus.topic_name(topic)])
    found = [model.validate_python(r) for r in raw]
    return [m for m in found if getattr(m.data, "prompt_id", None) in prompt_ids]


@pytest.fixture(scope="module")
def verifier() -> CredentialVerifier:
    return load_verifier(credentials_dir())


async def test_a_prompt_fires_after_its_time_and_after_the_timer_restarted(
    rt: ServiceRuntime, verifier: CredentialVerifier
) -> None:
    """SPEC H-02: the timer is the row: a prompt fires after ``expires_at`` (never before),
    and one that fell due while no timer ran fires as soon as a new one starts."""
    recorder = MessageRecorder(rt.sessions)
    first, second = required(Turn.new(), expires_in_s=1.0), required(Turn.new(), expires_in_s=1.5)
    for event in (first, second):
        await recorder.handle(event)
    timer = _timer(rt)
    await timer.start()

    async def first_fired() -> bool:
        return (await _row(rt.sessions, first.data.prompt_id)).status == "timeout"

    await _until(first_fired, "the first prompt timed out")
    await timer.stop()
    fired = await _row(rt.sessions, first.data.prompt_id)
    assert fired.fired_at is not None and fired.fired_at >= first.data.expires_at
    assert fired.decided_by == "system" and fired.decision == "timeout"

    async def second_due() -> bool:
        return datetime.now(UTC) > second.data.expires_at + timedelta(seconds=0.5)

    await _until(second_due, "the second prompt's time passed")
    assert (await _row(rt.sessions, second.data.prompt_id)).status == "pending"
    restarted = _timer(rt)
    await restarted.start()

    async def second_fired() -> bool:
        return (await _row(rt.sessions, second.data.prompt_id)).status == "timeout"

    await _until(second_fired, "the second prompt timed out after the restart")
    await restarted.stop()
    ids = {first.data.prompt_id, second.data.prompt_id}
    decided = await _messages(rt, Topic.AGENT_CONTROL, ids)
    assert sorted(m.data.prompt_id for m in decided) == sorted(ids)
    check = RecordCheck(verifier)
    for message in decided:
        assert message.type == "approval_decided" and message.data.decision == "timeout"
        assert message.data.call_id in {first.data.call_id, second.data.call_id}
        assert check.refusal(Topic.AGENT_CONTROL, message) is None, "the engine would refuse it"


async def test_two_timers_fire_each_prompt_once(rt: ServiceRuntime) -> None:
    """SPEC H-02: several memory replicas: a prompt is fired by exactly one
    (``FOR UPDATE SKIP LOCKED``), and a row another replica holds is skipped, not waited
    for, then fired once it is free."""
    recorder = MessageRecorder(rt.sessions)
    events = [required(Turn.new(), expires_in_s=-5) for _ in range(6)]
    for event in events:
        await recorder.handle(event)
    held = events[0].data.prompt_id
    async with rt.sessions.begin() as s:  # another replica in the middle of firing it
        await s.execute(select(AgentPrompt).where(AgentPrompt.prompt_id == held).with_for_update())
        counts = await asyncio.wait_for(asyncio.gather(_timer(rt).tick(), _timer(rt).tick()), 30)
        assert (await _row(rt.sessions, held)).status == "pending"
    assert sum(counts) == 5
    assert await _timer(rt).tick() == 1
    ids = {e.data.prompt_id for e in events}
    decided = await _messages(rt, Topic.AGENT_CONTROL, ids)
    assert sorted(m.data.prompt_id for m in decided) == sorted(ids), "each fired exactly once"


async def test_an_escalating_prompt_is_escalated_then_times_out(rt: ServiceRuntime) -> None:
    """SPEC H-03 (escalation): the first expiry publishes ``approval_escalated`` for the
    approver group and opens a second window; the second one times the prompt out."""
    event = required(Turn.new(), expires_in_s=-1, on_timeout="escalate")
    await MessageRecorder(rt.sessions).handle(event)
    timer = _timer(rt)
    assert await timer.tick() == 1
    row = await _row(rt.sessions, event.data.prompt_id)
    assert row.status == "escalated" and row.expires_at > event.data.expires_at
    notices = await _messages(rt, Topic.SESSION_NOTICES, {event.data.prompt_id})
    assert [(n.type, n.data.approver_group) for n in notices] == [("approval_escalated", "ops")]
    assert notices[0].data.expires_at == row.expires_at
    assert await timer.tick() == 0, "the second window has not passed"
    assert await timer.tick(now=row.expires_at + timedelta(seconds=1)) == 1
    final = await _row(rt.sessions, event.data.prompt_id)
    assert final.status == "timeout" and "approver group" in final.decision_reason
    decided = await _messages(rt, Topic.AGENT_CONTROL, {event.data.prompt_id})
    assert [m.data.decision for m in decided] == ["timeout"]


async def test_the_turn_credential_is_renewed_at_the_gateway(
    rt: ServiceRuntime, infra: dict[str, str], own_database: str, verifier: CredentialVerifier
) -> None:
    """SPEC H-03: an expiry continues the turn with a credential the gateway renewed, never
    the old one stretched: the decision carries a fresh credential for the same turn.

    Uses the real gateway app (in process); skipped while the gateway has no renewal route
    (it is built in parallel)."""
    from weft_gateway.app import create_app as gateway_app
    from weft_gateway.settings import GatewaySettings
    from weft_gateway.tenant_registry import TenantRegistry
    from weft_testkit.kafka import settings_fields

    keys = DevCredentials.load()
    turn = Turn.new()
    old = turn.credential(keys, ttl_s=60)
    event = required(turn, credential=old, expires_in_s=-1)
    await TenantRegistry(rt.sessions).ensure(turn.tenant_id)
    await MessageRecorder(rt.sessions).handle(event)
    gateway = gateway_app(
        GatewaySettings(
            **settings_fields(infra),  # type: ignore[arg-type]
            database_url=own_database,
            redis_url=infra["WEFT_REDIS_URL"],
        )
    )
    signer = load_signer(credentials_dir(), ISSUER)
    renewer = TurnCredentialRenewer(
        "http://gateway",
        lambda: signer.service("gateway", [RENEW_SCOPE]),
        transport=httpx.ASGITransport(app=gateway),
    )
    probe = await renewer._http.post(RENEW_ROUTE, json={})
    if probe.status_code == 404:
        await renewer.aclose()
        await gateway.state.runtime.db.dispose()
        await gateway.state.runtime.redis.aclose()
        pytest.skip("the gateway has no POST /internal/turn-credentials/renew on this branch")
    try:
        assert await _timer(rt, renewer).tick() == 1
    finally:
        await renewer.aclose()
        await gateway.state.runtime.db.dispose()
        await gateway.state.runtime.redis.aclose()
    decided = await _messages(rt, Topic.AGENT_CONTROL, {event.data.prompt_id})
    fresh = decided[0].data.turn_credential
    assert fresh and fresh != old
    renewed = verifier.verify_request(fresh, RECORDS)
    assert (renewed.tenant_id, renewed.session_id, renewed.request_id) == (
        turn.tenant_id,
        turn.session_id,
        turn.request_id,
    )


async def test_an_unreachable_gateway_leaves_the_prompt_for_the_next_tick(
    rt: ServiceRuntime,
) -> None:
    """SPEC H-03: without a renewed credential the timeout is not published yet (the turn
    could not continue on the old one); the prompt stays due and is fired by a later tick."""
    keys = DevCredentials.load()
    events = [required(Turn.new(), keys, expires_in_s=-1) for _ in range(3)]
    for event in events:
        await MessageRecorder(rt.sessions).handle(event)
    signer = load_signer(credentials_dir(), ISSUER)
    renewer = CountingRenewer("http://127.0.0.1:1", lambda: signer.service("gateway", ["x"]))
    assert await _timer(rt, renewer).tick() == 0  # it dials a closed port
    assert renewer.calls == 1, "one unanswered call defers the tick's other timeouts"
    for event in events:
        row = await _row(rt.sessions, event.data.prompt_id)
        assert row.status == "pending" and row.fired_at is None
    ids = {e.data.prompt_id for e in events}
    assert await _messages(rt, Topic.AGENT_CONTROL, ids) == []
    await renewer.aclose()


class CountingRenewer(TurnCredentialRenewer):
    """Counts the renewal calls the timer makes."""

    calls = 0

    async def renew(self, token: str) -> str:
        self.calls += 1
        return await super().renew(token)


async def test_an_undecodable_approval_record_is_dead_lettered_and_the_next_recorded(
    infra: dict[str, str], own_database: str
) -> None:
    """SPEC H-02: memory's recorder reads approval events from agent.events; one it cannot
    decode goes to the DLQ (the consumer is not stuck) and the next is recorded."""
    env = {**infra, "WEFT_DATABASE_URL": own_database}
    async with service_runtime(env, "memory-dlq") as rt:
        recorder = MessageRecorder(rt.sessions)
        rt.bus.consume(Topic.AGENT_EVENTS, "memory", recorder.handle, types=RECORDED_TYPES)
        await rt.broker.start()
        good = required(Turn.new())
        broken = good.model_dump(mode="json")
        del broken["data"]["prompt_id"]
        topic = rt.bus.topic_name(Topic.AGENT_EVENTS)
        headers = {"type": "tool_approval_required", "content-type": "application/json"}
        await rt.broker.publish(json.dumps(broken).encode(), topic, key=good.key(), headers=headers)
        await rt.bus.publish(Topic.AGENT_EVENTS, good)
        [letter] = await dead_letters(rt, 1)
        assert letter["data"]["reason"].startswith("undecodable")
        assert "prompt_id" in letter["data"]["reason"]

        async def recorded() -> bool:
            async with rt.sessions() as s:
                return await s.get(AgentPrompt, good.data.prompt_id) is not None

        await _until(recorded, "the next approval event was recorded")
