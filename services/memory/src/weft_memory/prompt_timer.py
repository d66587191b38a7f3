"""The durable expiry timer of prompts (SPEC H-02, H-03).

A prompt's timer is its row: ``expires_at`` while its status is ``pending`` or
``escalated`` (partial index ``ix_agent_prompts_due``). Every memory replica runs one
:class:`PromptTimer` that looks every ``poll_s`` for overdue rows and takes each with
``FOR UPDATE SKIP LOCKED``: a row is fired by one replica, and the row stays locked until
its message is published and its new status committed (a crash in between fires it again
later; the engine ignores a decision on a prompt it already settled). Nothing lives in a
process: after any restart the timer starts with the service and fires what is overdue.

When a prompt expires:
- pending, and its agent escalates: ``ApprovalEscalated`` on ``session.notices`` for the
  approver group; status ``escalated``, a second window of ``escalation_timeout_s``;
- otherwise: a fresh turn credential from the gateway (``renewal``), then
  ``ApprovalDecided(timeout)`` on ``agent.control``; status ``timeout``. The gateway not
  answering leaves the row for the next tick; a refusal (say the tenant was disabled)
  still publishes the timeout, without a credential, so the turn is not left waiting.

Both messages carry memory's own service credential (issuer ``memory``), scoped to the
topic's records and to ``approvals:expire`` / ``approvals:escalate``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import structlog
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import (
    ApprovalDecided,
    ApprovalDecidedData,
    ApprovalEscalated,
    ApprovalEscalatedData,
    Topic,
)
from weft_platform.bus import EventBus
from weft_platform.metrics import APPROVAL_DECISIONS, APPROVALS_WAITING
from weft_storage.memory.models_approvals import AgentPrompt, ApprovalDecision

from weft_memory.prompts import WAITING
from weft_memory.renewal import RenewalRefused, RenewalUnavailable, TurnCredentialRenewer

log = structlog.get_logger(__name__)

EXPIRE_SCOPE = "approvals:expire"
ESCALATE_SCOPE = "approvals:escalate"
APPROVAL_OUTCOMES = ("approved", "denied", "expired")
"""The outcomes ``weft_approval_decisions_total`` counts."""
WAITING_COUNT_EVERY_S = 15.0
"""How often the waiting prompts are counted for ``weft_approvals_waiting``."""

OwnCredential = Callable[[Topic, str], str]
"""memory's service credential for records of a topic, with one more scope."""


@dataclass(kw_only=True)
class PromptTimer:
    """Fires overdue prompts; one per memory process."""

    sessions: async_sessionmaker[AsyncSession]
    bus: EventBus
    renewer: TurnCredentialRenewer
    own_credential: OwnCredential
    poll_s: float = 1.0
    deployment: str = ""
    """The topic prefix: only this deployment's prompts are fired here."""
    _task: asyncio.Task[None] | None = field(default=None, init=False)
    _gateway_down: bool = field(default=False, init=False)
    """The gateway did not answer during this tick: the other timeouts wait for the next
    one too, instead of each waiting out its own connect timeout."""

    async def start(self) -> None:
        """Start polling (an app startup hook)."""
        for outcome in APPROVAL_OUTCOMES:  # each outcome's series exists from the start
            APPROVAL_DECISIONS.labels(outcome=outcome)
        self._task = asyncio.create_task(self._run(), name="prompt-timer")

    async def stop(self) -> None:
        """Stop polling; a row being fired is rolled back and fired by the next tick."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def count_waiting(self) -> None:
        """Set ``weft_approvals_waiting`` to this deployment's prompts still waiting."""
        query = select(func.count()).where(
            AgentPrompt.status.in_(WAITING),
            AgentPrompt.deployment == self.deployment,
        )
        async with self.sessions() as s:
            APPROVALS_WAITING.set(int((await s.execute(query)).scalar_one()))

    async def _run(self) -> None:
        counted = 0.0
        while True:
            if time.monotonic() - counted >= WAITING_COUNT_EVERY_S:
                counted = time.monotonic()
                try:
                    await self.count_waiting()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the gauge keeps its last value
                    log.warning("approvals_waiting_count_failed", error=repr(exc))
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database or Kafka is down: the next tick retries
                log.warning("prompt_timer_failed", error=repr(exc))
            await asyncio.sleep(self.poll_s)

    async def tick(self, now: datetime | None = None) -> int:
        """Fire every prompt overdue at ``now`` that no other replica holds; how many."""
        fired = 0
        held_back: set[str] = set()
        self._gateway_down = False
        while True:
            at = now or datetime.now(UTC)
            async with self.sessions.begin() as s:
                row = await _next_due(s, at, held_back, self.deployment)
                if row is None:
                    return fired
                if await self._fire(s, row, at):
                    fired += 1
                else:
                    held_back.add(row.prompt_id)

    async def _fire(self, s: AsyncSession, row: AgentPrompt, now: datetime) -> bool:
        """Publish the prompt's expiry and update its row; False: left for the next tick."""
        if row.status == "pending" and row.on_timeout == "escalate":
            await self._escalate(row, now)
            return True
        if self._gateway_down and row.turn_credential:
            return False
        try:
            fresh: str | None = await self._renewed(row)
        except RenewalUnavailable as exc:
            log.warning("prompt_timeout_deferred", prompt_id=row.prompt_id, reason=str(exc))
            self._gateway_down = True
            return False
        reason = _timeout_reason(row)
        await self.bus.publish(Topic.AGENT_CONTROL, self._timeout(row, fresh, reason, now))
        APPROVAL_DECISIONS.labels(outcome="expired").inc()
        row.status, row.decision, row.decision_reason = "timeout", "timeout", reason
        row.decided_at, row.decided_by, row.fired_at = now, "system", now
        s.add(
            ApprovalDecision(
                prompt_id=row.prompt_id,
                tenant_id=row.tenant_id,
                decided_by="system",
                decision="timeout",
                reason=reason,
                applied=True,
                at=now,
            )
        )
        log.info("prompt_timed_out", prompt_id=row.prompt_id, renewed=fresh is not None)
        return True

    async def _renewed(self, row: AgentPrompt) -> str | None:
        if not row.turn_credential:
            log.warning("prompt_without_turn_credential", prompt_id=row.prompt_id)
            return None
        try:
            return await self.renewer.renew(row.turn_credential)
        except RenewalRefused as exc:
            log.warning("turn_credential_not_renewed", prompt_id=row.prompt_id, reason=str(exc))
            return None

    def _timeout(
        self, row: AgentPrompt, fresh: str | None, reason: str, now: datetime
    ) -> ApprovalDecided:
        data = ApprovalDecidedData(
            prompt_id=row.prompt_id, call_id=row.call_id, decision="timeout", reason=reason,
            decided_by="system", decided_at=now, turn_credential=fresh,
        )  # fmt: skip
        return ApprovalDecided(
            tenant_id=row.tenant_id, session_id=row.session_id, request_id=row.request_id,
            credential=self.own_credential(Topic.AGENT_CONTROL, EXPIRE_SCOPE), data=data,
        )  # fmt: skip

    async def _escalate(self, row: AgentPrompt, now: datetime) -> None:
        until = now + timedelta(seconds=row.escalation_timeout_s)
        data = ApprovalEscalatedData.model_validate(
            {
                "prompt_id": row.prompt_id,
                "call_id": row.call_id,
                "tool_name": row.tool_name,
                "risk": row.risk,
                "arguments": row.arguments,
                "arguments_digest": row.arguments_digest,
                "agent_id": row.agent_id,
                "user_id": row.user_id,
                "approver_group": row.approver_group,
                "expires_at": until,
            }
        )
        notice = ApprovalEscalated(
            tenant_id=row.tenant_id, session_id=row.session_id, request_id=row.request_id,
            credential=self.own_credential(Topic.SESSION_NOTICES, ESCALATE_SCOPE), data=data,
        )  # fmt: skip
        await self.bus.publish(Topic.SESSION_NOTICES, notice)
        row.status, row.expires_at, row.fired_at = "escalated", until, now
        log.info("prompt_escalated", prompt_id=row.prompt_id, group=row.approver_group)


async def _next_due(
    s: AsyncSession, now: datetime, held_back: set[str], deployment: str
) -> AgentPrompt | None:
    query = (
        select(AgentPrompt)
        .where(
            AgentPrompt.status.in_(WAITING),
            AgentPrompt.expires_at <= now,
            AgentPrompt.deployment == deployment,
        )
        .order_by(AgentPrompt.expires_at)
        .limit(1)
        .with_for_update(skip_locked=True)
    )
    if held_back:
        query = query.where(AgentPrompt.prompt_id.not_in(held_back))
    row: AgentPrompt | None = await s.scalar(query)
    return row


def _timeout_reason(row: AgentPrompt) -> str:
    if row.status == "escalated":
        return f"no decision within {row.timeout_s:g} s, nor from the approver group"
    return f"no decision within {row.timeout_s:g} s"
