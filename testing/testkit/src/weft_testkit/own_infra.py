"""A database and a Redis database of one's own on the shared servers: for a test module
or a benchmark whose stack must not share them (it wipes Redis, or its memory's timers
must see only its own prompts), cleaned up by whoever made them."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import asyncpg

from weft_testkit.stack import infra_env


def redis_url(db: int) -> str:
    """The shared Redis server's database ``db``."""
    return urlunsplit(urlsplit(infra_env()["WEFT_REDIS_URL"])._replace(path=f"/{db}"))


def database_url(suffix: str, scheme: str | None = None) -> str:
    """The URL of the shared PostgreSQL's database named like the main one plus
    ``suffix`` (``scheme``: e.g. ``postgresql`` for asyncpg itself)."""
    base = urlsplit(infra_env()["WEFT_DATABASE_URL"])
    url = base._replace(path=base.path + suffix)
    return urlunsplit(url._replace(scheme=scheme) if scheme else url)


def _name(suffix: str) -> str:
    return urlsplit(infra_env()["WEFT_DATABASE_URL"]).path.lstrip("/") + suffix


async def _admin(sql: str) -> None:
    base = urlsplit(infra_env()["WEFT_DATABASE_URL"])
    conn = await asyncpg.connect(urlunsplit(base._replace(scheme="postgresql")))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def create_database(suffix: str, *, fresh: bool = False) -> None:
    """Create the database of ``suffix`` unless it exists (``fresh``: drop it first)."""
    if fresh:
        await drop_database(suffix)
    base = urlsplit(infra_env()["WEFT_DATABASE_URL"])
    conn = await asyncpg.connect(urlunsplit(base._replace(scheme="postgresql")))
    try:
        name = _name(suffix)
        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
            await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


async def drop_database(suffix: str) -> None:
    """Drop the database of ``suffix`` (its connections closed), if it exists."""
    await _admin(f'DROP DATABASE IF EXISTS "{_name(suffix)}" WITH (FORCE)')
