"""The TurnAuditor's Kafka read on the real broker: a turn's events are found on the
partition the bus's producer put them on (session key, default partitioner), from the
turn's start on; the highest seq and whether a ``complete`` is there."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from weft_contracts import (
    CompleteData,
    CompleteEvent,
    ErrorData,
    ErrorEvent,
    Topic,
    TurnStartedData,
    TurnStartedEvent,
    TurnStatus,
)
from weft_engine.auditor import UnfinishedTurn
from weft_engine.trails import KafkaTurnTrails, TurnTrail

from tests.integration.kafka_helpers import service_runtime


async def test_each_turns_trail_is_read_from_its_sessions_partition(
    infra: dict[str, str],
) -> None:
    async with service_runtime(infra, "trails-test", partitions=4, start=True) as rt:
        started_at = datetime.fromtimestamp(time.time(), UTC)
        turns = [
            UnfinishedTurn(tenant_id="t1", session_id=f"session-{i}", request_id=f"r{i}",
                           started_at=started_at)
            for i in range(6)
        ]  # fmt: skip
        for i, turn in enumerate(turns):
            ids = turn.model_dump(exclude={"started_at"})
            started = TurnStartedData(query="q", user_id="u", agent_id="a", mode="agent")
            await rt.bus.publish(Topic.AGENT_EVENTS, TurnStartedEvent(**ids, seq=1, data=started))
            for seq in range(2, 2 + i):  # turn i has i + 1 events
                error = ErrorData(code="x", message="x")
                await rt.bus.publish(Topic.AGENT_EVENTS, ErrorEvent(**ids, seq=seq, data=error))
            if i % 2:
                done = CompleteData(status=TurnStatus.FAILED)
                await rt.bus.publish(Topic.AGENT_EVENTS, CompleteEvent(**ids, seq=i + 2, data=done))
        reader = KafkaTurnTrails(rt.settings, rt.bus.topic_name(Topic.AGENT_EVENTS), margin_s=60)
        trails = await reader.read(turns[1:])  # turn 0 not asked for
        expected = {
            f"r{i}": TurnTrail(last_seq=i + 2 if i % 2 else i + 1, completed=bool(i % 2))
            for i in range(1, 6)
        }
        assert trails == expected
        assert await reader.read([]) == {}
