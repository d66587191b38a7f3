"""Fixtures shared by the integration tests: a migrated PostgreSQL and its engine/sessions."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)


@pytest.fixture(scope="session")
def migrated(infra: dict[str, str]) -> str:
    """The database URL after ``weft_storage.migrate upgrade`` (once per test run)."""
    subprocess.run(
        [sys.executable, "-m", "weft_storage.migrate", "upgrade"],
        env={**infra}, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return infra["WEFT_DATABASE_URL"]


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
