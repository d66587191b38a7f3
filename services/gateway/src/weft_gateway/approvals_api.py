"""The approval routes of the public API (SPEC H-02..H-04, docs/approvals.md):
``/api/v1/agent/prompts`` (list, read, decide) and ``/api/v1/agent/grants`` (list,
create, revoke).

Memory owns prompts, decisions and grants and applies the access rule (same tenant, and
the prompt's own user or a key with ``approvals:decide``; anything else 404, never 403).
The gateway checks what it can alone first (the body's shape and size; edited arguments
against the tool's argument model), then, once memory has recorded a decision, publishes
``ApprovalDecided`` on ``agent.control`` with a fresh credential for the waiting turn: a
turn that waited past its first credential's life continues with this one. The same
decision sent again is published again (the engine ignores a prompt it already settled),
so a decision whose publish failed is completed by sending it once more.
"""

# No ``from __future__ import annotations``: FastAPI must see the route annotations.

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator
from weft_contracts import ApprovalDecided, ApprovalDecidedData, Topic
from weft_contracts.approvals import Decision, GrantScope, RememberScope
from weft_platform.bus import EventBus
from weft_platform.credentials import TURN_AUDIENCE, CredentialSigner
from weft_tool_catalog.specs import argument_problems

from weft_gateway.approvals_client import ApprovalsClient, PromptView
from weft_gateway.auth import ApiKeyAuth, Principal

Id = Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")]
Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")]
LOOKUP_POLL_S = 0.2


class DecisionBody(BaseModel):
    """Body of ``POST /agent/prompts/{prompt_id}``."""

    model_config = ConfigDict(extra="forbid")
    decision: Decision
    arguments: dict[str, Any] | None = Field(
        default=None,
        description="approve only: the arguments to run instead of the asked ones, whole "
        "(validated against the tool's arguments); omitted: as asked.",
    )
    reason: str = Field(default="", max_length=2000)
    remember: RememberScope = Field(
        default="call",
        description="call: this call only; session / agent: also later calls of this tool "
        "in this session / by this agent (a grant). Ignored for an always-ask tool.",
    )

    @model_validator(mode="after")
    def _arguments_only_to_approve(self) -> "DecisionBody":
        if self.arguments is not None and self.decision != "approve":
            raise ValueError("arguments can only be given with decision 'approve'")
        if self.decision == "deny" and self.remember != "call":
            raise ValueError("remember applies to an approval; a denial is for this call only")
        return self


class DecisionAnswer(BaseModel):
    """Answer of ``POST /agent/prompts/{prompt_id}``."""

    prompt_id: str
    status: str
    decision: str
    repeated: bool = Field(description="The same decision had been applied before.")
    remember_ignored: bool = Field(
        description="remember was asked for an always-ask tool: no grant was made."
    )


class GrantCreate(BaseModel):
    """Body of ``POST /agent/grants`` (SPEC H-04)."""

    model_config = ConfigDict(extra="forbid")
    scope: GrantScope
    session_id: Name | None = None
    agent_id: Name
    operations: list[Name] = Field(min_length=1, max_length=200, description="Tool names.")
    resources: list[Annotated[str, Field(min_length=1, max_length=500)]] = Field(
        default_factory=list, max_length=200, description="Empty: any the agent may use."
    )
    expires_at: AwareDatetime | None = None

    @model_validator(mode="after")
    def _scope_fits(self) -> "GrantCreate":
        if self.scope == "session" and self.session_id is None:
            raise ValueError("a session grant names its session_id")
        if self.scope != "session" and self.session_id is not None:
            raise ValueError(f"a {self.scope} grant names no session_id")
        if self.expires_at is not None and self.expires_at <= datetime.now(UTC):
            raise ValueError("expires_at is in the past")
        return self


def check_arguments(tool_name: str, arguments: dict[str, Any]) -> None:
    """422 with the reasons unless ``arguments`` fit the built-in tool's argument model. A
    tool Weft has no model for (an MCP tool) is checked by the engine against its
    registered schema when it dispatches."""
    problems = argument_problems(tool_name, arguments)
    if problems is not None:
        raise HTTPException(422, f"the edited arguments do not fit tool {tool_name!r}: {problems}")


@dataclass(kw_only=True)
class Approvals:
    """What the approval routes work with."""

    memory: ApprovalsClient
    bus: EventBus
    signer: CredentialSigner | None
    turn_ttl_s: float
    lookup_wait_s: float = 5.0

    async def decide(self, who: Principal, prompt_id: str, body: DecisionBody) -> DecisionAnswer:
        """Check, record (memory), then publish the decision (Flow 3)."""
        if body.arguments is not None:
            prompt = await self._prompt_when_recorded(who, prompt_id)
            check_arguments(str(prompt["tool_name"]), body.arguments)
        answer = await self.memory.decide(who, prompt_id, body.model_dump(mode="json"))
        recorded: PromptView = answer["prompt"]
        await self.publish(who, recorded, body)
        return DecisionAnswer(
            prompt_id=prompt_id,
            status=str(recorded.get("status", "")),
            decision=body.decision,
            repeated=bool(answer.get("repeated", False)),
            remember_ignored=bool(answer.get("remember_ignored", False)),
        )

    async def publish(self, who: Principal, prompt: PromptView, body: DecisionBody) -> None:
        """``ApprovalDecided`` on ``agent.control`` with a fresh turn credential."""
        credential = self.turn_credential(who, prompt)
        decided_at = prompt.get("decided_at") or datetime.now(UTC).isoformat()
        event = ApprovalDecided(
            tenant_id=who.tenant_id,
            session_id=prompt["session_id"],
            request_id=prompt["request_id"],
            credential=credential,
            data=ApprovalDecidedData(
                prompt_id=prompt["prompt_id"],
                call_id=prompt["call_id"],
                decision=body.decision,
                arguments=body.arguments,
                reason=body.reason,
                remember=body.remember,
                decided_by=who.user_id,
                decided_at=decided_at,
                turn_credential=credential,
            ),
        )
        await self.bus.publish(Topic.AGENT_CONTROL, event)

    def turn_credential(self, who: Principal, prompt: PromptView) -> str | None:
        """A request credential for the prompt's turn, for the prompt's user (the turn's
        owner, whoever decides), audience ``TURN_AUDIENCE``, a turn deadline's life.

        Its knowledge bases are the turn's own (memory's view reads them from the turn's
        credential; None: not restricted), never the decider's: a decision never widens
        the turn's reach. A view without them (an older memory) gives none at all."""
        if self.signer is None:
            return None
        kbs: list[str] | None = prompt.get("knowledge_base_ids", [])
        return self.signer.request(
            tenant_id=who.tenant_id,
            user_id=str(prompt["user_id"]),
            session_id=str(prompt["session_id"]),
            request_id=str(prompt["request_id"]),
            knowledge_base_ids=kbs,
            audience=TURN_AUDIENCE,
            ttl_s=self.turn_ttl_s,
        )

    async def _prompt_when_recorded(self, who: Principal, prompt_id: str) -> PromptView:
        """The prompt, waiting up to ``lookup_wait_s`` for memory to record it (a person
        may answer from the stream before memory's recorder has read the event)."""
        deadline = time.monotonic() + self.lookup_wait_s
        while True:
            try:
                return await self.memory.get_prompt(who, prompt_id)
            except HTTPException as exc:
                if exc.status_code != 404 or time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(LOOKUP_POLL_S)


def capped_body(max_bytes: int) -> Any:
    """A dependency that answers 413 for a body over ``max_bytes`` (the app-wide cap is
    for uploads; a decision or a grant is small)."""

    async def check(request: Request) -> None:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise HTTPException(413, f"body larger than {max_bytes} bytes")
        if len(await request.body()) > max_bytes:
            raise HTTPException(413, f"body larger than {max_bytes} bytes")

    return check


def approvals_router(approvals: Approvals, auth: ApiKeyAuth, *, max_body_bytes: int) -> APIRouter:
    """``/api/v1/agent/prompts`` and ``/api/v1/agent/grants``."""
    router = APIRouter(
        prefix="/api/v1/agent",
        tags=["approvals"],
        dependencies=[Depends(capped_body(max_body_bytes))],
    )
    Who = Annotated[Principal, Depends(auth)]
    memory = approvals.memory

    @router.get("/prompts")
    async def list_prompts(
        who: Who,
        session_id: Annotated[
            str, Query(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")
        ],
        status: Literal["pending", "all"] = "pending",
    ) -> Any:
        """A session's prompts (pending: waiting or escalated), oldest first."""
        return await memory.list_prompts(who, session_id, status)

    @router.get("/prompts/{prompt_id}")
    async def get_prompt(who: Who, prompt_id: Id) -> Any:
        """One prompt with every decision presented for it."""
        return await memory.get_prompt(who, prompt_id)

    @router.post("/prompts/{prompt_id}")
    async def decide(who: Who, prompt_id: Id, body: DecisionBody) -> DecisionAnswer:
        """Approve (optionally with edited arguments) or deny; 409 for a different
        decision after the first, or a prompt that timed out or was cancelled."""
        return await approvals.decide(who, prompt_id, body)

    @router.get("/grants")
    async def list_grants(
        who: Who,
        session_id: Annotated[str | None, Query(max_length=128)] = None,
        agent_id: Annotated[str | None, Query(max_length=128)] = None,
        status: Literal["live", "all"] = "live",
    ) -> Any:
        """The caller's grants, newest first (``all``: revoked and expired ones too), of one
        session or agent when named."""
        named = {"session_id": session_id, "agent_id": agent_id}
        filters = {k: v for k, v in named.items() if v} | {"status": status}
        return await memory.list_grants(who, filters)

    @router.post("/grants", status_code=201)
    async def create_grant(who: Who, body: GrantCreate) -> Any:
        """A standing approval of some tools for a session, an agent or an automation."""
        return await memory.create_grant(who, body.model_dump(mode="json"))

    @router.delete("/grants/{grant_id}", status_code=204)
    async def revoke_grant(who: Who, grant_id: Id) -> Response:
        await memory.revoke_grant(who, grant_id)
        return Response(status_code=204)

    return router
