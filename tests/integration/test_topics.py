"""Topic administration on the real Kafka: a prefixed deployment's topics are created with
their partition counts and deleted again, and nothing else is touched."""

from __future__ import annotations

import asyncio
import secrets

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from weft_contracts import Topic
from weft_platform.settings import KafkaAccess
from weft_platform.topics import delete_topics, ensure_topics

from tests.integration.kafka_helpers import kafka_access


async def _topics(access: KafkaAccess) -> set[str]:
    admin = AIOKafkaAdminClient(**access.client_options())
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def test_a_prefixed_deployment_is_created_then_deleted_alone(
    infra: dict[str, str],
) -> None:
    access = kafka_access(infra)
    mine, neighbour = f"it{secrets.token_hex(4)}.", f"it{secrets.token_hex(4)}."
    env = {"WEFT_TOPIC_PARTITIONS": "1"}
    created = (await ensure_topics(access, env, prefix=mine)).created
    await ensure_topics(access, env, prefix=neighbour)
    assert sorted(created) == sorted(mine + t.value for t in Topic)
    assert (await ensure_topics(access, env, prefix=mine)).created == [], "already there"

    assert await delete_topics(access, mine) == sorted(created)
    async with asyncio.timeout(30):  # the broker deletes asynchronously
        while True:
            left = await _topics(access)
            if not any(name.startswith(mine) for name in left):
                break
            await asyncio.sleep(0.2)
    assert {neighbour + t.value for t in Topic} <= left, "another deployment's topics went too"
    await delete_topics(access, neighbour)


async def test_deleting_refuses_an_empty_prefix(infra: dict[str, str]) -> None:
    """Never a deployment's own, unprefixed topics."""
    with pytest.raises(ValueError, match="needs a prefix"):
        await delete_topics(kafka_access(infra), "")
