"""ORM models of human approvals (SPEC H-02..H-05), owned by memory.

- ``agent_prompts``: one row per prompt (a call waiting for a person), recorded from the
  engine's ``tool_approval_required`` event (natural key: the prompt id), with its durable
  expiry timer (``expires_at`` while ``status`` is ``pending`` or ``escalated``) and, once
  decided, the decision.
- ``approval_decisions``: every decision ever presented for a prompt, kept (who, when,
  reason, the arguments as approved), the first one applied, a later different one refused.
- ``agent_grants``: standing approvals (SPEC H-04).
- ``agent_run_suspensions``: the state of a turn that waits for a person, as the engine
  last saved it, so that the wait survives the loss of Redis (the engine stores it through
  memory's internal API; the engine opens no database).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, DateTime, Float, Index, Integer, LargeBinary, String, Text, func
from sqlalchemy.orm import Mapped, mapped_column

from weft_storage.base import Base, JsonB


class AgentPrompt(Base):
    """A prompt and its timer."""

    __tablename__ = "agent_prompts"
    __table_args__ = (
        Index(
            "ix_agent_prompts_due",
            "expires_at",
            postgresql_where="status IN ('pending', 'escalated')",
        ),
        Index("ix_agent_prompts_session", "tenant_id", "session_id", "created_at"),
        Index("ix_agent_prompts_request", "request_id"),
    )
    prompt_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128))
    session_id: Mapped[str] = mapped_column(String(128))
    request_id: Mapped[str] = mapped_column(String(128))
    user_id: Mapped[str] = mapped_column(String(128))
    agent_id: Mapped[str] = mapped_column(String(128))
    call_id: Mapped[str] = mapped_column(String(256))
    kind: Mapped[str] = mapped_column(String(32), default="approval")
    tool_name: Mapped[str] = mapped_column(String(128))
    risk: Mapped[str] = mapped_column(String(16))
    always_ask: Mapped[bool] = mapped_column(default=False)
    arguments: Mapped[dict[str, Any]] = mapped_column(JsonB, default=dict)
    """Masked like the stream's ``tool_call`` (E-23)."""
    arguments_digest: Mapped[str] = mapped_column(String(64))
    reason: Mapped[str] = mapped_column(Text, default="")
    authorization_url: Mapped[str | None] = mapped_column(Text, nullable=True)
    """Migration 0022: where the user authorises an MCP server (kind
    ``mcp_authorization``, SPEC H-06)."""
    status: Mapped[str] = mapped_column(String(16), default="pending")
    """pending, escalated, approved, denied, timeout, cancelled."""
    on_timeout: Mapped[str] = mapped_column(String(16), default="deny")
    approver_group: Mapped[str | None] = mapped_column(String(128), nullable=True)
    timeout_s: Mapped[float] = mapped_column(Float)
    escalation_timeout_s: Mapped[float] = mapped_column(Float, default=3600.0)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    turn_credential: Mapped[str | None] = mapped_column(Text, nullable=True)
    """The turn's credential from the event: presented to the gateway to renew it when the
    timer fires after its life."""
    event_id: Mapped[str] = mapped_column(String(32))
    event_seq: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    decided_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    decided_by: Mapped[str | None] = mapped_column(String(256), nullable=True)
    decision: Mapped[str | None] = mapped_column(String(16), nullable=True)
    decision_reason: Mapped[str] = mapped_column(Text, default="")
    remember: Mapped[str] = mapped_column(String(16), default="call")
    fired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    """When the timer published its ``ApprovalDecided`` (timeout) or escalation."""
    deployment: Mapped[str] = mapped_column(String(128), default="", server_default="")
    """Migration 0020: the topic prefix of the memory that recorded it; only that
    deployment's timer fires it."""


class ApprovalDecision(Base):
    """One decision presented for a prompt (kept, whether applied or refused)."""

    __tablename__ = "approval_decisions"
    __table_args__ = (Index("ix_approval_decisions_prompt", "prompt_id", "id"),)
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    prompt_id: Mapped[str] = mapped_column(String(64))
    tenant_id: Mapped[str] = mapped_column(String(128))
    decided_by: Mapped[str] = mapped_column(String(256))
    decision: Mapped[str] = mapped_column(String(16))
    """approve, deny, timeout, cancel."""
    arguments: Mapped[dict[str, Any] | None] = mapped_column(JsonB, nullable=True)
    """The arguments as approved when edited (None: as asked)."""
    reason: Mapped[str] = mapped_column(Text, default="")
    remember: Mapped[str] = mapped_column(String(16), default="call")
    applied: Mapped[bool] = mapped_column(default=True)
    """False: refused (a different decision after the first)."""
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())


class AgentGrant(Base):
    """A standing approval (``weft_contracts.Grant``)."""

    __tablename__ = "agent_grants"
    __table_args__ = (
        Index("ix_agent_grants_lookup", "tenant_id", "user_id", "agent_id"),
        Index("ix_agent_grants_session", "tenant_id", "session_id"),
    )
    grant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128))
    user_id: Mapped[str] = mapped_column(String(128))
    scope: Mapped[str] = mapped_column(String(16))
    session_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    agent_id: Mapped[str] = mapped_column(String(128))
    operations: Mapped[list[str]] = mapped_column(JsonB, default=list)
    resources: Mapped[list[str]] = mapped_column(JsonB, default=list)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    source_prompt_id: Mapped[str | None] = mapped_column(String(64), nullable=True)


class RunSuspension(Base):
    """A waiting turn's state as the engine last saved it (newest ``version`` wins)."""

    __tablename__ = "agent_run_suspensions"
    request_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(String(128))
    session_id: Mapped[str] = mapped_column(String(128))
    version: Mapped[int] = mapped_column(Integer)
    state: Mapped[bytes] = mapped_column(LargeBinary)
    """The engine's opaque turn state (zlib-compressed JSON)."""
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
