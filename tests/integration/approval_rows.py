"""Prompts for memory's approval tests: the engine's ``tool_approval_required`` events and
memory's app on a database of the test's own (a memory timer of any other stack sharing
the main database would otherwise fire the tests' overdue prompts)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from weft_contracts import ToolApprovalRequiredData, ToolApprovalRequiredEvent, new_event_id
from weft_memory.app import MemorySettings, create_app
from weft_testkit.credentials import DevCredentials
from weft_testkit.kafka import settings_fields


@dataclass(frozen=True)
class Turn:
    """One turn's ids (a fresh tenant each, so tests never see each other's rows)."""

    tenant_id: str
    session_id: str
    request_id: str
    user_id: str = "alice"
    agent_id: str = "agent-1"

    @classmethod
    def new(cls, **kw: Any) -> Turn:
        """Fresh ids."""
        return cls(
            tenant_id=kw.pop("tenant_id", f"t-{secrets.token_hex(4)}"),
            session_id=kw.pop("session_id", f"ses_{secrets.token_hex(6)}"),
            request_id=kw.pop("request_id", f"req_{secrets.token_hex(6)}"),
            **kw,
        )

    def credential(self, keys: DevCredentials, **kw: Any) -> str:
        """This turn's request credential, as the gateway signs it."""
        return keys.request(self.tenant_id, self.user_id, self.session_id, self.request_id, **kw)


def required(
    turn: Turn,
    keys: DevCredentials | None = None,
    *,
    tool: str = "write_file",
    expires_in_s: float = 600.0,
    on_timeout: str = "deny",
    always_ask: bool = False,
    credential: str | None = None,
    seq: int = 3,
) -> ToolApprovalRequiredEvent:
    """A ``tool_approval_required`` event of ``turn`` (signed with its credential)."""
    data = ToolApprovalRequiredData.model_validate(
        {
            "prompt_id": new_event_id(),
            "round": 0,
            "call_id": f"call_{secrets.token_hex(4)}",
            "tool_name": tool,
            "risk": "write",
            "always_ask": always_ask,
            "arguments": {"path": "notes.md", "content": "***"},
            "arguments_digest": "ab" * 32,
            "reason": "writes a file",
            "agent_id": turn.agent_id,
            "user_id": turn.user_id,
            "expires_at": datetime.now(UTC) + timedelta(seconds=expires_in_s),
            "timeout_s": 600.0,
            "on_timeout": on_timeout,
            "approver_group": "ops",
            "escalation_timeout_s": 3600.0,
        }
    )
    token = credential if credential is not None else (turn.credential(keys) if keys else None)
    return ToolApprovalRequiredEvent(
        tenant_id=turn.tenant_id, session_id=turn.session_id, request_id=turn.request_id,
        seq=seq, data=data, credential=token,
    )  # fmt: skip


def memory_settings(infra: dict[str, str], database_url: str, **kw: Any) -> MemorySettings:
    """memory's settings on ``database_url`` (Kafka never dialled by the routes)."""
    return MemorySettings(
        **settings_fields(infra),  # type: ignore[arg-type]
        database_url=database_url,
        redis_url=infra["WEFT_REDIS_URL"],
        **kw,
    )


@asynccontextmanager
async def memory_api(settings: MemorySettings) -> AsyncIterator[httpx.AsyncClient]:
    """memory's whole app in process (its credential guard on; no background tasks)."""
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://memory") as client:
        yield client
    await app.state.runtime.db.dispose()
    await app.state.runtime.redis.aclose()


def bearer(token: str) -> dict[str, str]:
    """``Authorization`` for ``token``."""
    return {"Authorization": f"Bearer {token}"}
