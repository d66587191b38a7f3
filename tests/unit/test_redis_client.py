"""weft_platform.redis_client: pooled connections are pinged after idling and a dead one is
replaced once; a timed-out command is never resent (it may have run)."""

from __future__ import annotations

from redis.asyncio import BlockingConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from weft_platform.redis_client import redis_client


async def test_connections_are_health_checked_and_resent_once_on_a_dead_connection() -> None:
    client = redis_client("redis://127.0.0.1:1/0", health_check_s=7)
    try:
        kwargs = client.connection_pool.connection_kwargs
        assert kwargs["health_check_interval"] == 7
        retry = kwargs["retry"]
        assert retry.get_retries() == 1
        errors = retry._supported_errors
        assert RedisConnectionError in errors
        assert RedisTimeoutError not in errors
    finally:
        await client.aclose()


async def test_a_bounded_pool_blocks_instead_of_failing() -> None:
    client = redis_client("redis://127.0.0.1:1/0", max_connections=12, wait_s=3.0)
    try:
        pool = client.connection_pool
        assert isinstance(pool, BlockingConnectionPool)
        assert pool.max_connections == 12
        assert pool.timeout == 3.0
    finally:
        await client.aclose()
