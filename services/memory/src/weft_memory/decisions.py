"""A person's decision on a prompt (SPEC H-03), recorded once.

The first decision on a waiting prompt is applied: the prompt takes its status, and
"remember this session / this agent" becomes a grant (never for a prompt about a tool
marked "always ask": no grant may skip it). The same decision again is answered as a
repeat (the gateway publishes it again; the engine ignores a prompt it already settled);
a different one, or any decision on a prompt that expired or whose turn ended, is refused
(409). Every decision presented is kept in ``approval_decisions``, applied or not.

A decision may arrive before memory's recorder has read the prompt's event (the person
saw the event on the stream first): :meth:`DecisionDesk.decide` waits for the prompt up to
``wait_s`` before it answers 404. A prompt the caller may not see is waited for the same
way, so the answer's timing tells nothing about another user's prompts.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts.approvals import Decision, GrantScope, RememberScope
from weft_contracts.text import CleanJson, CleanText
from weft_platform.credentials import RequestCredential
from weft_platform.metrics import APPROVAL_DECISIONS
from weft_storage.memory.models_approvals import AgentPrompt, ApprovalDecision

from weft_memory.grants import GrantLifetimes, NewGrant, add_grant
from weft_memory.prompts import WAITING, PromptView, visible_prompt

POLL_S = 0.1
"""How often a decision waiting for its prompt looks again."""
STATUS_OF: dict[Decision, str] = {"approve": "approved", "deny": "denied"}
DECIDED_OUTCOME = STATUS_OF
"""A person's decision as ``weft_approval_decisions_total`` counts it."""


class DecisionBody(BaseModel):
    """``POST /internal/prompts/{prompt_id}/decision``."""

    model_config = ConfigDict(extra="forbid")

    decision: Decision
    arguments: CleanJson | None = Field(
        default=None, description="approve only: the arguments as edited (None: as asked)."
    )
    reason: CleanText = Field(default="", max_length=2000)
    remember: RememberScope = "call"

    @model_validator(mode="after")
    def _arguments_only_to_approve(self) -> DecisionBody:
        if self.arguments is not None and self.decision != "approve":
            raise ValueError("arguments may only come with an approve")
        if self.arguments is not None and not isinstance(self.arguments, dict):
            raise ValueError("arguments must be a JSON object")
        return self


class DecisionResult(BaseModel):
    """The answer: the prompt after the decision; ``repeated``: it was already applied;
    ``remember_ignored``: the prompt's tool always asks, so no grant was made."""

    prompt: PromptView
    repeated: bool
    remember_ignored: bool = False


class DecisionRefused(Exception):
    """A different decision after the first, or a prompt no longer waiting (HTTP 409)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class PromptNotFound(Exception):
    """No prompt by that id that the caller may see, after waiting (HTTP 404)."""


@dataclass
class DecisionDesk:
    """Records decisions on prompts."""

    sessions: async_sessionmaker[AsyncSession]
    lifetimes: GrantLifetimes
    wait_s: float = 5.0

    async def decide(
        self, prompt_id: str, body: DecisionBody, caller: RequestCredential
    ) -> DecisionResult:
        """Apply, repeat or refuse ``body``; raises :class:`PromptNotFound` or
        :class:`DecisionRefused`."""
        deadline = time.monotonic() + self.wait_s
        while True:
            async with self.sessions.begin() as s:
                row = await visible_prompt(s, prompt_id, caller, lock=True)
                if row is not None:
                    outcome = await self._settle(s, row, body, caller)
            if row is not None:
                if isinstance(outcome, DecisionRefused):
                    raise outcome
                return outcome
            if time.monotonic() >= deadline:
                raise PromptNotFound(prompt_id)
            await asyncio.sleep(POLL_S)

    async def _settle(
        self, s: AsyncSession, row: AgentPrompt, body: DecisionBody, caller: RequestCredential
    ) -> DecisionResult | DecisionRefused:
        """The decision's effect on the locked ``row``; a refusal is returned, not raised,
        so that the transaction keeping the refused attempt commits."""
        now = datetime.now(UTC)
        if row.status in WAITING:
            ignored = self._apply(s, row, body, caller, now)
            APPROVAL_DECISIONS.labels(outcome=DECIDED_OUTCOME[body.decision]).inc()
            _keep(s, row, body, caller, applied=True)
            return DecisionResult(
                prompt=PromptView.of(row), repeated=False, remember_ignored=ignored
            )
        same = row.status == STATUS_OF[body.decision] and (
            await _applied_arguments(s, row.prompt_id) == body.arguments
        )
        _keep(s, row, body, caller, applied=False)
        if same:
            ignored = row.always_ask and body.remember != "call"
            return DecisionResult(
                prompt=PromptView.of(row), repeated=True, remember_ignored=ignored
            )
        return DecisionRefused(f"prompt {row.prompt_id} is already {row.status}")

    def _apply(
        self,
        s: AsyncSession,
        row: AgentPrompt,
        body: DecisionBody,
        caller: RequestCredential,
        now: datetime,
    ) -> bool:
        """Set the prompt's decision; a grant for "remember"; whether it was ignored."""
        row.status = STATUS_OF[body.decision]
        row.decision = body.decision
        row.decided_at = now
        row.decided_by = caller.user_id
        row.decision_reason = body.reason
        row.remember = body.remember
        if body.decision != "approve" or body.remember == "call":
            return False
        if row.always_ask:
            return True
        scope: GrantScope = "session" if body.remember == "session" else "agent"
        spec = NewGrant(
            scope=scope,
            session_id=row.session_id if scope == "session" else None,
            agent_id=row.agent_id,
            operations=[row.tool_name],
        )
        add_grant(
            s, tenant_id=row.tenant_id, user_id=row.user_id, spec=spec,
            expires_at=self.lifetimes.expiry(scope, now), source_prompt_id=row.prompt_id,
        )  # fmt: skip
        return False


def _keep(
    s: AsyncSession,
    row: AgentPrompt,
    body: DecisionBody,
    caller: RequestCredential,
    *,
    applied: bool,
) -> None:
    s.add(
        ApprovalDecision(
            prompt_id=row.prompt_id,
            tenant_id=row.tenant_id,
            decided_by=caller.user_id,
            decision=body.decision,
            arguments=body.arguments,
            reason=body.reason,
            remember=body.remember,
            applied=applied,
            at=datetime.now(UTC),
        )
    )


async def _applied_arguments(s: AsyncSession, prompt_id: str) -> Any:
    """The arguments of the decision that was applied (None: as asked)."""
    return await s.scalar(
        select(ApprovalDecision.arguments)
        .where(ApprovalDecision.prompt_id == prompt_id, ApprovalDecision.applied.is_(True))
        .order_by(ApprovalDecision.id)
        .limit(1)
    )
