"""Forged session notices on the real Kafka (SPEC Q-01, invariant 5): the gateway's notices
group projects a ``suggestions_ready`` into the session's stream only when its credential
vouches for it (the turn's request credential, or a service credential scoped
``records:weft.session.notices.v1``). Unsigned, another tenant's, or signed by a service
whose credential has no such scope: dead-lettered with the reason, never in the stream,
and the notices after it still flow."""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any

import pytest
from redis.asyncio import Redis
from weft_contracts import SuggestedQuestion, SuggestionsReady, SuggestionsReadyData, Topic
from weft_gateway.notices import register_notice_projector
from weft_gateway.streams import stream_key
from weft_platform.bus import REFUSED
from weft_platform.credentials import RECORDS, load_signer
from weft_platform.record_credentials import record_scope
from weft_testkit.credentials import DevCredentials, credentials_dir, signed

from tests.integration.kafka_helpers import dead_letters, service_runtime

pytestmark = pytest.mark.kafka


def _notice(tenant: str, session: str, text: str) -> SuggestionsReady:
    question = SuggestedQuestion(id="g0", text=text, source="generated")
    return SuggestionsReady(
        tenant_id=tenant,
        session_id=session,
        request_id="r-victim",
        data=SuggestionsReadyData(
            assistant_message_id="m1a",
            placement="follow_up",
            locale="en",
            state="ready",
            questions=[question],
        ),
    )


async def test_forged_notices_are_dead_lettered_and_never_projected(
    infra: dict[str, str],
) -> None:
    keys = DevCredentials.load(credentials_dir())
    tenant, session = "victim-" + secrets.token_hex(3), "s-" + secrets.token_hex(3)
    notices_scope = [record_scope(Topic.SESSION_NOTICES)]
    suggestions = load_signer(credentials_dir(), "suggestions")
    engine = load_signer(credentials_dir(), "engine")
    attacker = keys.request("attacker", "mallory", "s-attacker", "r-attacker")
    forged = [
        _notice(tenant, session, "unsigned"),
        _notice(tenant, session, "other tenant").model_copy(update={"credential": attacker}),
        _notice(tenant, session, "engine scope").model_copy(
            update={"credential": engine.service(RECORDS, [record_scope(Topic.AGENT_EVENTS)])}
        ),
    ]
    own = suggestions.service(RECORDS, notices_scope)
    async with service_runtime(
        infra, "notices-test", check_credentials=True, consumer_attempts=1
    ) as rt:
        register_notice_projector(rt.bus, rt.redis, max_len=100, retention_s=120)
        await rt.broker.start()
        await rt.bus.publish(Topic.SESSION_NOTICES, signed(keys, _notice(tenant, session, "first")))
        for record in forged:
            await rt.bus.publish(Topic.SESSION_NOTICES, record)
        last = _notice(tenant, session, "last").model_copy(update={"credential": own})
        await rt.bus.publish(Topic.SESSION_NOTICES, last)

        texts = await _projected(rt.redis, stream_key(tenant, session), until="last")
        assert texts == ["first", "last"], "a forged notice reached the stream"
        letters = await dead_letters(rt, 3)
        reasons = sorted(letter["data"]["reason"] for letter in letters)
        assert all(reason.startswith(REFUSED) for reason in reasons)
        assert any("without a credential" in r for r in reasons)
        assert any("another tenant" in r for r in reasons)
        assert any("does not grant 'records:weft.session.notices.v1'" in r for r in reasons)


async def _projected(redis: Redis, key: str, *, until: str) -> list[str]:
    async def texts() -> list[str]:
        entries: Any = await redis.xrange(key)
        found = []
        for _, fields in entries:
            notice = json.loads(fields[b"event"])
            found.append(notice["data"]["questions"][0]["text"])
        return found

    for _ in range(600):
        found = await texts()
        if until in found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"{until!r} never projected: {await texts()}")
