"""Prompts (SPEC H-02, H-03): recorded from the engine's events, read by the gateway.

memory owns a prompt's row and its durable timer (``agent_prompts``, ``expires_at`` while
the prompt waits). The row is written from ``tool_approval_required`` (natural key: the
prompt id, so a re-delivered event changes nothing), settled from
``tool_approval_resolved``, and cancelled when its turn's ``complete`` arrives while it
still waits; the turn's suspended state goes with it.

Who sees a prompt: its tenant's user it was asked of, or a caller of that tenant whose key
has the ``approvals:decide`` scope (a platform service answering escalations). Anyone
else is told it does not exist (404, never 403: no existence oracle).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import jwt
from pydantic import BaseModel
from sqlalchemy import delete, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession
from weft_contracts import ToolApprovalRequiredEvent, ToolApprovalResolvedEvent
from weft_platform.credentials import RequestCredential
from weft_storage.memory.models_approvals import AgentPrompt, ApprovalDecision, RunSuspension

DECIDE_SCOPE = "approvals:decide"
"""A key scope that lets its holder see and answer every prompt of its tenant."""
WAITING = ("pending", "escalated")
"""Statuses of a prompt whose timer runs."""


class DecisionView(BaseModel):
    """One decision presented for a prompt (applied, or refused: ``applied`` false)."""

    decided_by: str
    decision: str
    arguments: dict[str, Any] | None
    reason: str
    remember: str
    applied: bool
    at: datetime


class PromptView(BaseModel):
    """A prompt's public fields; never the turn credential it keeps for its timer."""

    prompt_id: str
    kind: str
    session_id: str
    request_id: str
    call_id: str
    tool_name: str
    risk: str
    always_ask: bool
    arguments: dict[str, Any]
    """Masked like the stream's ``tool_call`` (E-23)."""
    arguments_digest: str
    reason: str
    authorization_url: str | None = None
    """SPEC H-06: where the user authorises the MCP server (kind ``mcp_authorization``)."""
    status: str
    expires_at: datetime
    on_timeout: str
    approver_group: str | None
    created_at: datetime
    decided_at: datetime | None
    decided_by: str | None
    decision: str | None
    decision_reason: str
    remember: str
    user_id: str
    agent_id: str
    event_id: str
    knowledge_base_ids: list[str] | None = None
    """The turn's knowledge-base restriction (its credential's ``kbs``; None: none): the
    gateway gives the credential it mints for a decision no wider a reach."""
    decisions: list[DecisionView] | None = None
    """Every decision presented (``GET /internal/prompts/{id}`` only)."""

    @classmethod
    def of(cls, row: AgentPrompt, decisions: list[ApprovalDecision] | None = None) -> PromptView:
        """The view of ``row`` (with its decisions when given)."""
        own = {"decisions", "knowledge_base_ids"}
        fields = {name: getattr(row, name) for name in cls.model_fields if name not in own}
        fields["knowledge_base_ids"] = _turn_knowledge_bases(row.turn_credential)
        if decisions is not None:
            fields["decisions"] = [
                DecisionView(
                    decided_by=d.decided_by,
                    decision=d.decision,
                    arguments=d.arguments,
                    reason=d.reason,
                    remember=d.remember,
                    applied=d.applied,
                    at=d.at,
                )
                for d in decisions
            ]
        return cls.model_validate(fields)


def _turn_knowledge_bases(token: str | None) -> list[str] | None:
    """The ``kbs`` claim of the turn's credential, verified when its event was recorded
    (the record check), read here without checking it again; None: no restriction."""
    if not token:
        return []  # no credential kept: no knowledge base, never a wider reach
    kbs = jwt.decode(token, options={"verify_signature": False}).get("kbs")
    return [str(k) for k in kbs] if isinstance(kbs, list) else None


def may_see(row: AgentPrompt, caller: RequestCredential) -> bool:
    """The access rule: same tenant, and the prompt's user or a key that decides."""
    if row.tenant_id != caller.tenant_id:
        return False
    if caller.session_id is not None and caller.session_id != row.session_id:
        return False
    return row.user_id == caller.user_id or DECIDE_SCOPE in caller.scopes


async def record_required(
    s: AsyncSession, event: ToolApprovalRequiredEvent, deployment: str = ""
) -> None:
    """Insert the prompt once; its envelope credential is the turn's, kept for renewal;
    ``deployment``: this memory's topic prefix (its timer fires only its own prompts)."""
    d = event.data
    values = {
        "prompt_id": d.prompt_id, "tenant_id": event.tenant_id,
        "session_id": event.session_id, "request_id": event.request_id,
        "user_id": d.user_id, "agent_id": d.agent_id, "call_id": d.call_id,
        "kind": d.kind, "tool_name": d.tool_name, "risk": d.risk,
        "always_ask": d.always_ask, "arguments": d.arguments,
        "arguments_digest": d.arguments_digest, "reason": d.reason, "status": "pending",
        "authorization_url": d.authorization_url,
        "on_timeout": d.on_timeout, "approver_group": d.approver_group,
        "timeout_s": d.timeout_s, "escalation_timeout_s": d.escalation_timeout_s,
        "expires_at": d.expires_at, "turn_credential": event.credential,
        "event_id": event.id, "event_seq": event.seq, "created_at": event.time,
        "deployment": deployment,
    }  # fmt: skip
    await s.execute(insert(AgentPrompt).values(**values).on_conflict_do_nothing())


async def record_resolved(s: AsyncSession, event: ToolApprovalResolvedEvent) -> None:
    """Settle a prompt the engine resolved, unless a decision or the timer already did."""
    d = event.data
    await s.execute(
        update(AgentPrompt)
        .where(
            AgentPrompt.prompt_id == d.prompt_id,
            AgentPrompt.tenant_id == event.tenant_id,
            AgentPrompt.status.in_(WAITING),
        )
        .values(
            status=d.outcome,  # the outcomes are the final statuses' names
            decided_at=event.time,
            decided_by=d.decided_by,
            decision_reason=d.reason,
            remember=d.remember,
        )
    )


async def turn_ended(s: AsyncSession, tenant_id: str, request_id: str) -> None:
    """A turn's ``complete``: prompts still waiting are cancelled (nothing will answer
    them any more) and its suspended state is dropped."""
    await s.execute(
        update(AgentPrompt)
        .where(
            AgentPrompt.request_id == request_id,
            AgentPrompt.tenant_id == tenant_id,
            AgentPrompt.status.in_(WAITING),
        )
        .values(status="cancelled", decided_by="system")
    )
    await s.execute(
        delete(RunSuspension).where(
            RunSuspension.request_id == request_id, RunSuspension.tenant_id == tenant_id
        )
    )


async def visible_prompt(
    s: AsyncSession, prompt_id: str, caller: RequestCredential, *, lock: bool = False
) -> AgentPrompt | None:
    """The prompt if ``caller`` may see it (locked for update with ``lock``), else None."""
    query = select(AgentPrompt).where(AgentPrompt.prompt_id == prompt_id)
    row = await s.scalar(query.with_for_update() if lock else query)
    return row if row is not None and may_see(row, caller) else None


async def decisions_of(s: AsyncSession, prompt_id: str) -> list[ApprovalDecision]:
    """Every decision presented for a prompt, oldest first."""
    query = (
        select(ApprovalDecision)
        .where(ApprovalDecision.prompt_id == prompt_id)
        .order_by(ApprovalDecision.id)
    )
    return list((await s.scalars(query)).all())
