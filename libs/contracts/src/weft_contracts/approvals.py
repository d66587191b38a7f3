"""Human approvals (SPEC H-01..H-05): the policy, and the messages of a prompt's life.

A tool call is allowed, denied or asked about (:func:`decide`) from the tool's risk class,
the agent's access level (capped by the tenant's maximum, :func:`cap_access`), the tool's
"always ask" mark and the grants a person gave earlier. An asked call suspends the turn:
the engine emits ``tool_approval_required`` on ``agent.events`` and holds nothing while it
waits; memory records the prompt from that event and owns its durable expiry timer. A
person's decision (through the gateway) or the expiry (memory) reaches the engine as
``ApprovalDecided`` on ``agent.control``; ``tool_approval_resolved`` follows on the stream.
An expired prompt whose agent asks for escalation is published on ``session.notices`` as
``approval_escalated`` for an approver group, and expires for good after a second window.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from weft_contracts.envelope import Envelope, Payload
from weft_contracts.text import CleanJson, CleanText

RiskClass = Literal["read", "probe", "write", "destructive"]
"""What a tool can do: ``read`` reads the tenant's own data; ``probe`` reaches outside
(the web) without changing anything; ``write`` changes state that can be restored (a
workspace file, checkpointed per turn); ``destructive`` changes what cannot be undone."""

RISK_ORDER: tuple[RiskClass, ...] = ("read", "probe", "write", "destructive")

AccessLevel = Literal["read_only", "confirm", "auto_write"]
"""An agent's execution rights (SPEC A-04, H-01), from the least to the most."""

ACCESS_ORDER: tuple[AccessLevel, ...] = ("read_only", "confirm", "auto_write")

PolicyVerdict = Literal["allow", "deny", "ask"]

RememberScope = Literal["call", "session", "agent"]
"""How far a person's approval reaches: this call only, the rest of this session, or
this agent's later sessions of the same user (a grant, SPEC H-04)."""

GrantScope = Literal["session", "agent", "automation"]
"""Where a grant applies. ``automation`` is stored and listed; nothing uses it yet
(automations do not exist)."""

Decision = Literal["approve", "deny"]
"""What a person answers; editing the arguments is ``approve`` with ``arguments``."""

Outcome = Literal["approved", "denied", "timeout", "cancelled"]
"""How a prompt ended (``tool_approval_resolved``)."""

PromptKind = Literal["approval", "uncertain_outcome", "mcp_authorization"]
"""``approval``: the policy asks before a call runs. ``uncertain_outcome`` (SPEC H-05): a
write whose outcome is unknown after a crash; approve runs it again, deny skips it.
``mcp_authorization`` (SPEC H-06): an MCP server needs the user's OAuth consent; the
gateway approves it when the authorisation completes and the call is sent again."""

DEFAULT_APPROVAL_TIMEOUT_S = 600.0
"""SPEC H-03: 10 minutes."""


def cap_access(level: AccessLevel, maximum: AccessLevel | None) -> AccessLevel:
    """``level`` lowered to the tenant's ``maximum`` (None: no cap)."""
    if maximum is None:
        return level
    return min(level, maximum, key=ACCESS_ORDER.index)


def decide(
    risk: RiskClass, level: AccessLevel, *, always_ask: bool = False, granted: bool = False
) -> PolicyVerdict:
    """SPEC H-01. ``granted``: a live grant covers this tool. A grant turns an "ask" into
    "allow" and nothing else: it never lifts a denial (it never widens the agent's rights)
    and never skips a tool marked "always ask"."""
    if level == "read_only" and risk in ("write", "destructive"):
        return "deny"
    if always_ask:
        return "ask"
    if risk in ("read", "probe"):
        return "allow"
    asks = level == "confirm" or risk == "destructive"
    if asks and not granted:
        return "ask"
    return "allow"


class ApprovalPolicy(Payload):
    """An agent's approval settings, carried in its ``AgentConfig`` snapshot."""

    access_level: AccessLevel = Field(
        default="auto_write",
        description="SPEC A-04 default auto_write; already capped by the tenant's maximum "
        "when it reaches the engine.",
    )
    timeout_s: float = Field(
        default=DEFAULT_APPROVAL_TIMEOUT_S,
        ge=10,
        le=7 * 24 * 3600,
        description="How long a prompt waits for a person (SPEC H-03).",
    )
    on_timeout: Literal["deny", "escalate"] = Field(
        default="deny",
        description="deny: the call is answered 'timed out'. escalate: the prompt is "
        "published on session.notices for ``approver_group`` and waits "
        "``escalation_timeout_s`` more before it is denied.",
    )
    approver_group: str | None = Field(default=None, min_length=1, max_length=128)
    escalation_timeout_s: float = Field(default=3600.0, ge=10, le=7 * 24 * 3600)
    always_ask: list[str] = Field(
        default_factory=list,
        max_length=200,
        description="Tools asked about at every access level, whatever the grants.",
    )


class ToolApprovalRequiredData(Payload):
    """A call waits for a person (``agent.events``). ``arguments`` are masked like the
    ``tool_call`` event's (E-23); ``arguments_digest`` names the exact arguments that run
    if the call is approved unchanged."""

    prompt_id: str = Field(min_length=1, max_length=64)
    kind: PromptKind = "approval"
    round: int = Field(ge=0)
    call_id: str
    tool_name: str
    risk: RiskClass
    always_ask: bool = False
    arguments: CleanJson = Field(default_factory=dict)
    arguments_digest: str = Field(description="sha256 of the canonical JSON arguments.")
    reason: CleanText = Field(default="", description="Why a person is asked, for people.")
    agent_id: str
    user_id: str
    expires_at: datetime
    timeout_s: float
    on_timeout: Literal["deny", "escalate"] = "deny"
    approver_group: str | None = None
    escalation_timeout_s: float = 3600.0
    authorization_url: str | None = Field(
        default=None,
        max_length=4096,
        description="SPEC H-06 (kind ``mcp_authorization``): where the user authorises the "
        "MCP server; the call is retried once they have.",
    )


class ToolApprovalResolvedData(Payload):
    """A prompt ended (``agent.events``), before the call runs or its result comes back."""

    prompt_id: str
    call_id: str
    tool_name: str
    outcome: Outcome
    edited: bool = Field(default=False, description="Approved with changed arguments.")
    decided_by: str = Field(description="The deciding user id, or 'system' for an expiry.")
    reason: CleanText = ""
    remember: RememberScope = "call"


class ApprovalDecidedData(Payload):
    """A decision for the engine (``agent.control``): a person's (from the gateway) or an
    expiry (from memory, ``decision`` ``timeout``).

    ``turn_credential`` is a fresh request credential for the turn, signed by the gateway
    (for an expiry, memory obtains it from the gateway's renewal route): a turn that waited
    past its first credential's life continues with this one, never by stretching the old.
    """

    prompt_id: str = Field(min_length=1, max_length=64)
    call_id: str = Field(min_length=1, max_length=256)
    decision: Literal["approve", "deny", "timeout", "cancel"]
    arguments: CleanJson | None = Field(
        default=None, description="Edited arguments (approve only); None: as asked."
    )
    reason: CleanText = Field(default="", max_length=2000)
    remember: RememberScope = "call"
    decided_by: str = Field(min_length=1, max_length=256)
    decided_at: datetime
    turn_credential: str | None = Field(default=None, max_length=4096)


class ApprovalDecided(Envelope):
    """A person's decision on a prompt, or its expiry."""

    type: Literal["approval_decided"] = "approval_decided"
    data: ApprovalDecidedData


class ToolApprovalRequiredEvent(Envelope):
    """A call waits for a person's approval."""

    type: Literal["tool_approval_required"] = "tool_approval_required"
    data: ToolApprovalRequiredData


class ToolApprovalResolvedEvent(Envelope):
    """A prompt was approved, denied, expired or cancelled."""

    type: Literal["tool_approval_resolved"] = "tool_approval_resolved"
    data: ToolApprovalResolvedData


class ApprovalEscalatedData(Payload):
    """An expired prompt handed to an approver group (``session.notices``); a platform
    service decides through ``POST /api/v1/agent/prompts/{prompt_id}`` with a tenant key
    that has the ``approvals:decide`` scope."""

    prompt_id: str
    call_id: str
    tool_name: str
    risk: RiskClass
    arguments: CleanJson = Field(default_factory=dict)
    arguments_digest: str
    agent_id: str
    user_id: str
    approver_group: str | None
    expires_at: datetime = Field(description="When the escalated prompt is denied.")


class ApprovalEscalated(Envelope):
    """A prompt timed out and was escalated to an approver group."""

    type: Literal["approval_escalated"] = "approval_escalated"
    data: ApprovalEscalatedData


class Grant(Payload):
    """SPEC H-04: a person's standing approval of some tools (``operations``) on some
    resources (empty: any the agent may use), for a scope, until it expires or is revoked.
    A grant only spares the question; it never widens what the key or agent may do."""

    grant_id: str
    tenant_id: str
    user_id: str
    scope: GrantScope
    session_id: str | None = None
    agent_id: str
    operations: list[str] = Field(min_length=1, max_length=200)
    resources: list[str] = Field(default_factory=list, max_length=200)
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    source_prompt_id: str | None = None


def grant_covers(
    grant: Grant,
    tool_name: str,
    *,
    session_id: str,
    agent_id: str,
    at: float,
    arguments: dict[str, Any] | None = None,
) -> bool:
    """Whether a live grant spares asking about this call of ``tool_name`` in this
    session. A grant with ``resources`` covers only a call whose arguments name one of them
    (a value equal to it, or a path below it): one for ``output/`` spares writes there,
    not elsewhere."""
    if grant.revoked_at is not None:
        return False
    if grant.expires_at is not None and grant.expires_at.timestamp() <= at:
        return False
    if grant.agent_id != agent_id or tool_name not in grant.operations:
        return False
    if grant.resources and not _names_resource(arguments or {}, grant.resources):
        return False
    if grant.scope == "session":
        return grant.session_id == session_id
    return grant.scope == "agent"


def _names_resource(arguments: dict[str, Any], resources: list[str]) -> bool:
    """The call names a granted resource, and every path-like argument it has (a value
    with a ``/``) is one of them or below one: a call that also touches elsewhere is asked."""

    def granted(value: str) -> bool:
        return any(value == r or value.startswith(r.rstrip("/") + "/") for r in resources)

    values = [v for v in arguments.values() if isinstance(v, str)]
    paths = [v for v in values if "/" in v]
    return any(granted(v) for v in values) and all(granted(v) for v in paths)
