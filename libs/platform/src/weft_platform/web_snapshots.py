"""Full bodies fetched by ``web_fetch``, kept for ``read_file`` as ``web://`` (SPEC T-13, T-14).

A snapshot is readable only from the session that fetched it (the key holds tenant and
session) and expires after ``ttl_s``; an expired one reads as ``snapshot_expired``.
tool-exec writes them and the sandbox reads them, so the store lives here, next to the
other Redis helpers both services share, rather than in either one's code.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

from redis.asyncio import Redis


class SnapshotStore(Protocol):
    """Where web snapshots live."""

    async def save(self, tenant_id: str, session_id: str, url: str, text: str) -> str:
        """Store ``text``; return its ``web://`` path."""
        ...

    async def load(self, tenant_id: str, session_id: str, path: str) -> str | None:
        """The text at ``path`` for this session, or None when absent or expired."""
        ...


def snapshot_path(url: str) -> str:
    """The stable ``web://`` path of ``url`` (same URL, same path, within a session)."""
    return "web://" + hashlib.sha256(url.encode()).hexdigest()[:16]


class RedisSnapshotStore:
    """Snapshots in Redis with a TTL (bounded, invariant 6)."""

    def __init__(self, redis: Redis, *, ttl_s: int = 3600, max_chars: int = 2_000_000):
        self._redis = redis
        self._ttl_s = ttl_s
        self._max_chars = max_chars

    @staticmethod
    def _key(tenant_id: str, session_id: str, path: str) -> str:
        return f"weft:web_snapshot:{tenant_id}:{session_id}:{path.removeprefix('web://')}"

    async def save(self, tenant_id: str, session_id: str, url: str, text: str) -> str:
        """Store the text (cut at ``max_chars``) under the URL's path."""
        path = snapshot_path(url)
        key = self._key(tenant_id, session_id, path)
        await self._redis.set(key, text[: self._max_chars].encode(), ex=self._ttl_s)
        return path

    async def load(self, tenant_id: str, session_id: str, path: str) -> str | None:
        """The snapshot, or None."""
        raw = await self._redis.get(self._key(tenant_id, session_id, path))
        return raw.decode() if isinstance(raw, bytes) else raw


class MemorySnapshotStore:
    """In-process snapshots, for unit tests and single-process tools."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str, str], str] = {}

    async def save(self, tenant_id: str, session_id: str, url: str, text: str) -> str:
        """Store the text."""
        path = snapshot_path(url)
        self.items[(tenant_id, session_id, path)] = text
        return path

    async def load(self, tenant_id: str, session_id: str, path: str) -> str | None:
        """The snapshot, or None."""
        return self.items.get((tenant_id, session_id, path))
