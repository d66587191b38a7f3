"""Fixtures of the integration and security suites: a migrated PostgreSQL and its
engine/sessions, and the scripted LLM test double served over HTTP; loaded by
tests/conftest.py."""

from __future__ import annotations

import asyncio
import secrets
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import asyncpg
import pytest
import uvicorn
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from weft_scripted_llm.app import create_app as scripted_llm_app


@pytest.fixture(scope="session")
def migrated(infra: dict[str, str]) -> str:
    """The database URL after ``weft_storage.migrate upgrade`` (once per test run and
    worker)."""
    return _migrated(infra, infra["WEFT_DATABASE_URL"])


@pytest.fixture
async def engine(migrated: str) -> AsyncIterator[AsyncEngine]:
    """An async engine on the migrated database, disposed after the test."""
    eng = create_async_engine(migrated)
    yield eng
    await eng.dispose()


@pytest.fixture
async def sessions(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """ORM sessions bound to :func:`engine`."""
    return async_sessionmaker(engine, expire_on_commit=False)


@pytest.fixture
async def scripted_llm() -> AsyncIterator[str]:
    """The scripted LLM test double on a free port of this process, over real HTTP (the
    engine reaches it through the ``openai`` client); its base URL. Scripts go to
    ``POST {url}/_script``, the requests it saw come from ``GET {url}/_requests``."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()  # connections wait in the backlog until the server accepts them
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(scripted_llm_app(), log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    await serving
    sock.close()


@contextmanager
def fresh_database(infra: dict[str, str], prefix: str) -> Iterator[str]:
    """An empty database of its own on the shared PostgreSQL (not migrated), dropped
    afterwards; its URL."""
    url = infra["WEFT_DATABASE_URL"]
    name = f"{prefix}_{secrets.token_hex(4)}"
    asyncio.run(_admin(url, f'CREATE DATABASE "{name}"'))
    try:
        yield f"{url.rsplit('/', 1)[0]}/{name}"
    finally:
        asyncio.run(_drop(url, name))


async def _drop(url: str, name: str, attempts: int = 40) -> None:
    """DROP ... WITH (FORCE), tried again for a while: a connection that ran a query under
    another role (``SET LOCAL ROLE weft_sql_reader``) is one the test's role may not
    terminate until its pool has closed it."""
    for attempt in range(attempts):
        try:
            await _admin(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            return
        except (asyncpg.InsufficientPrivilegeError, asyncpg.ObjectInUseError):
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(0.25)


def migrate_upgrade(infra: dict[str, str], url: str) -> subprocess.Popen[bytes]:
    """``python -m weft_storage.migrate upgrade`` on ``url``, started (not awaited)."""
    return subprocess.Popen(
        [sys.executable, "-m", "weft_storage.migrate", "upgrade"],
        env={**infra, "WEFT_DATABASE_URL": url},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _migrated(infra: dict[str, str], url: str) -> str:
    done = migrate_upgrade(infra, url)
    output, _ = done.communicate(timeout=120)
    assert done.returncode == 0, output.decode()[-2000:]
    return url


@pytest.fixture(scope="module")
def own_database(infra: dict[str, str]) -> Iterator[str]:
    """A migrated database of the module's own, dropped after it: for tests that drive the
    ingestion queue themselves. The tool-exec workers of stacks running meanwhile share
    the main database and, woken by its notifications, would take the documents such a
    test queues (and ingest them under other bounds and embeddings)."""
    with fresh_database(infra, "weft_queue") as own:
        yield _migrated(infra, own)


async def _admin(url: str, statement: str) -> None:
    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        await conn.execute(statement)
    finally:
        await conn.close()
