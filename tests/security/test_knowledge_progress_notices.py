"""Forged ``knowledge_progress`` notices on the real Kafka (SPEC T-18, T-10, invariant 5):
the gateway's notices group projects one into a session's stream only when knowledge's
service credential scoped ``records:weft.session.notices.v1`` (or the session's own
request credential) vouches for it. Unsigned, another tenant's, signed by knowledge for
another topic, or over the contract's bounds: dead-lettered with the reason, never in the
stream, and the notices after it still flow."""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any

import pytest
from redis.asyncio import Redis
from weft_contracts import KnowledgeProgress, KnowledgeProgressData, Topic
from weft_gateway.notices import register_notice_projector
from weft_gateway.streams import stream_key
from weft_platform.credentials import RECORDS, load_signer
from weft_platform.record_credentials import record_scope
from weft_testkit.credentials import DevCredentials, credentials_dir

from tests.integration.kafka_helpers import dead_letters, service_runtime

pytestmark = pytest.mark.kafka


def _notice(tenant: str, session: str, reason: str) -> KnowledgeProgress:
    return KnowledgeProgress(
        tenant_id=tenant, session_id=session, request_id="doc_x",
        data=KnowledgeProgressData(knowledge_base_id="kb_x", document_id="doc_x", stage="wiki",
                                   state="failed", reason=reason),
    )  # fmt: skip


async def test_forged_progress_is_dead_lettered_and_never_projected(
    infra: dict[str, str],
) -> None:
    keys = DevCredentials.load(credentials_dir())
    tenant, session = "victim-" + secrets.token_hex(3), "s-" + secrets.token_hex(3)
    knowledge = load_signer(credentials_dir(), "knowledge")
    own = knowledge.service(RECORDS, [record_scope(Topic.SESSION_NOTICES)])
    attacker = keys.request("attacker", "mallory", "s-attacker", "r-attacker")
    forged = [
        _notice(tenant, session, "unsigned"),
        _notice(tenant, session, "other tenant").model_copy(update={"credential": attacker}),
        _notice(tenant, session, "other topic").model_copy(
            update={"credential": knowledge.service(RECORDS, [record_scope(Topic.AGENT_EVENTS)])}
        ),
    ]
    async with service_runtime(
        infra, "progress-notices-test", check_credentials=True, consumer_attempts=1
    ) as rt:
        register_notice_projector(rt.bus, rt.redis, max_len=100, retention_s=120)
        await rt.broker.start()
        for record in forged:
            await rt.bus.publish(Topic.SESSION_NOTICES, record)
        # Over the contract's bounds (9 counts): sent raw, as a hostile producer would.
        oversized = _notice(tenant, session, "oversized").model_dump(mode="json")
        oversized["data"]["documents"] = {f"s{i}": i for i in range(9)}
        oversized["credential"] = own
        await _raw(rt, oversized)
        last = _notice(tenant, session, "last").model_copy(update={"credential": own})
        await rt.bus.publish(Topic.SESSION_NOTICES, last)

        assert await _projected(rt.redis, stream_key(tenant, session), until="last") == ["last"]
        reasons = [letter["data"]["reason"] for letter in await dead_letters(rt, 4)]
        assert any("without a credential" in r for r in reasons)
        assert any("another tenant" in r for r in reasons)
        assert any("does not grant 'records:weft.session.notices.v1'" in r for r in reasons)
        assert len(reasons) == 4, reasons


async def _raw(rt: Any, record: dict[str, Any]) -> None:
    """Publish ``record`` as bytes, past the contract's own validation."""
    topic = rt.bus.topic_name(Topic.SESSION_NOTICES)
    await rt.broker.publish(json.dumps(record).encode(), topic, key=record["session_id"].encode())


async def _projected(redis: Redis, key: str, *, until: str) -> list[str]:
    async def reasons() -> list[str]:
        entries: Any = await redis.xrange(key)
        return [json.loads(fields[b"event"])["data"]["reason"] for _, fields in entries]

    for _ in range(600):
        found = await reasons()
        if until in found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"{until!r} never projected: {await reasons()}")
