"""memory's :class:`~weft_memory.workspaces.SandboxWorkspaces` wired, in process, to the
sandbox's real checkpoint routes (``weft_sandbox.checkpoints_api``) on a database: what a
fork or rollback asks of the sandbox, without the HTTP hop or the service credential."""

from __future__ import annotations

import httpx
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_memory.workspaces import SandboxWorkspaces
from weft_sandbox.checkpoints_api import checkpoints_router


def sandbox_workspaces(sessions: async_sessionmaker[AsyncSession]) -> SandboxWorkspaces:
    """The sandbox's checkpoint routes on ``sessions``, as memory calls them."""
    app = FastAPI()
    app.include_router(checkpoints_router(sessions))
    return SandboxWorkspaces(
        "http://sandbox", lambda: "unchecked", transport=httpx.ASGITransport(app=app)
    )
