"""Forged records on the real Kafka: a record with a valid envelope but another tenant's
credential (or another session's, or none) is dead-lettered with the reason, and the
records after it flow; both consumer kinds (one record at a time, batches) check it
(docs/security.md "Service credentials")."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from weft_contracts import Envelope, ThoughtData, ThoughtEvent, Topic
from weft_platform.bus import REFUSED
from weft_testkit.credentials import DevCredentials, credentials_dir, signed

from tests.integration.kafka_helpers import dead_letters, service_runtime

pytestmark = pytest.mark.kafka


def _thought(delta: str, tenant: str = "victim", session: str = "s-victim") -> ThoughtEvent:
    return ThoughtEvent(
        tenant_id=tenant,
        session_id=session,
        request_id="r-victim",
        data=ThoughtData(round=0, delta=delta),
    )


def _forged(keys: DevCredentials) -> list[tuple[str, Envelope]]:
    """Records an attacker with a credential of their own tenant could write."""
    attacker = keys.request("attacker", "mallory", "s-attacker", "r-attacker")
    other_session = keys.request("victim", "u", "s-other", "r-victim")
    return [
        ("another tenant's credential", _thought("t").model_copy(update={"credential": attacker})),
        ("another session", _thought("s").model_copy(update={"credential": other_session})),
        ("no credential", _thought("n")),
    ]


@pytest.mark.parametrize("batch", [False, True], ids=["consume", "consume_batch"])
async def test_a_forged_record_is_dead_lettered_and_the_next_flows(
    infra: dict[str, str], batch: bool
) -> None:
    keys = DevCredentials.load(credentials_dir())
    async with service_runtime(
        infra, "credential-test", check_credentials=True, consumer_attempts=1
    ) as rt:
        handled: list[str] = []
        done = asyncio.Event()

        async def handle(event: Any) -> None:
            handled.append(event.data.delta)
            if event.data.delta == "last":
                done.set()

        async def handle_batch(events: list[Any]) -> None:
            for event in events:
                await handle(event)

        if batch:
            rt.bus.consume_batch(Topic.AGENT_EVENTS, "projector-like", handle_batch)
        else:
            rt.bus.consume(Topic.AGENT_EVENTS, "memory-like", handle)
        await rt.broker.start()
        await rt.bus.publish(Topic.AGENT_EVENTS, signed(keys, _thought("first")))
        for _, record in _forged(keys):
            await rt.bus.publish(Topic.AGENT_EVENTS, record)
        await rt.bus.publish(Topic.AGENT_EVENTS, signed(keys, _thought("last")))
        await asyncio.wait_for(done.wait(), 30)

        assert handled == ["first", "last"], "a forged record reached the handler"
        letters = await dead_letters(rt, 3)
        reasons = {letter["data"]["raw"].split('"delta":"')[1][0]: letter for letter in letters}
        assert set(reasons) == {"t", "s", "n"}
        assert reasons["t"]["data"]["reason"] == (
            f"{REFUSED}: record's credential is for another tenant"
        )
        assert reasons["s"]["data"]["reason"].endswith("for another session")
        assert reasons["n"]["data"]["reason"] == f"{REFUSED}: record without a credential"
        assert all(letter["tenant_id"] == "victim" for letter in letters)
