"""The one way a Weft process builds its Redis client: pooled connections that survive a
Redis restart.

``Redis.from_url`` (and a client over a pool built with ``from_url``) gives connections with
no retry and no health check: after Redis restarts, every pooled connection is dead, and
each one fails the first command sent on it with ``ConnectionError``; a burst of requests
then fails once per pooled connection. PostgreSQL's pools survive the same restart because
they ping before use (``pool_pre_ping``). So here:

- a connection idle for more than ``health_check_s`` is checked with ``PING`` before it is
  reused; a failed ping drops it and the command goes on a new connection (a ping is always
  safe to resend);
- a command whose connection turns out to be dead (``ConnectionError``: refused, reset or
  closed by the server) is sent once more on a fresh connection. A ``TimeoutError`` is never
  retried: the command may have run, and ``INCR`` or ``XADD`` sent twice would count twice.
"""

from __future__ import annotations

from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

DEFAULT_HEALTH_CHECK_S = 5
"""Idle seconds after which a pooled connection is pinged before reuse."""
RECONNECT_RETRIES = 1
"""Resends of a command whose connection was found dead."""


def reconnect_retry() -> Retry:
    """One resend on a new connection, after ``ConnectionError`` only (short pause: a
    server that just came back may still be loading its data)."""
    return Retry(
        ExponentialBackoff(cap=0.5, base=0.05),
        RECONNECT_RETRIES,
        supported_errors=(RedisConnectionError,),
    )


def redis_client(
    url: str,
    *,
    health_check_s: int = DEFAULT_HEALTH_CHECK_S,
    max_connections: int | None = None,
    wait_s: float | None = None,
) -> Redis:
    """A Redis client of ``url`` whose pooled connections are checked and reconnected.

    ``max_connections`` with ``wait_s``: a blocking pool (a caller waits up to ``wait_s``
    for a free connection instead of failing when all are in use)."""
    options = {"health_check_interval": health_check_s, "retry": reconnect_retry()}
    pool: ConnectionPool
    if max_connections is not None:
        pool = BlockingConnectionPool.from_url(
            url, max_connections=max_connections, timeout=wait_s, **options
        )
    else:
        pool = ConnectionPool.from_url(url, **options)
    return Redis.from_pool(pool)  # closing the client closes its pool
