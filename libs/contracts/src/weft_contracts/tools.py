"""Tool calls from the engine to the workers and their results back."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field

from weft_contracts.envelope import Envelope, Payload
from weft_contracts.text import CleanJson, CleanText


class ToolContext(Payload):
    """What a tool may know about the caller; tenant and session are on the envelope."""

    user_id: str
    agent_id: str
    knowledge_base_ids: list[str] = Field(default_factory=list)
    max_output_chars: int = Field(default=24000, ge=256)
    retrieval_tenant_id: str | None = Field(
        default=None,
        description="SPEC E-26: knowledge tools of a shared agent read this tenant's KBs.",
    )
    key_knowledge_base_ids: list[str] | None = Field(
        default=None,
        description="SPEC A-09, T-11: the caller's API key is limited to these knowledge bases "
        "(None: not limited); what database_query reads when the turn names no base.",
    )
    document_ids: list[str] = Field(
        default_factory=list,
        max_length=500,
        description="SPEC A-11: the documents the turn's mentions narrowed search to; empty "
        "with no faq_tags: no mention.",
    )
    faq_tags: list[str] = Field(
        default_factory=list,
        max_length=20,
        description="SPEC A-11: the turn's @tag mentions that select FAQ entries; under a "
        "mention (this or document_ids not empty) the knowledge tools read only the "
        "mentioned documents and these FAQ entries.",
    )
    faq_score_boost: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="SPEC C-04: FAQ priority with this boost (quick-answer); None: off.",
    )

    @property
    def mentioned(self) -> bool:
        """Whether the turn's mentions narrowed its knowledge (SPEC A-11)."""
        return bool(self.document_ids or self.faq_tags)

    allowed_tools: list[str] | None = Field(
        default=None,
        description=(
            "The turn's effective tool set (SPEC A-08), the tools the model was offered; "
            "workers run no other. Absent (a call from an engine that predates the field): "
            "workers run nothing."
        ),
    )

    allowed_skills: list[str] | None = Field(
        default=None,
        description="SPEC S-04: the skills this turn's agent may read and run; absent: none.",
    )

    mcp_server_ids: list[str] | None = Field(
        default=None,
        description="SPEC T-19: the MCP servers this turn's agent may use; absent: none.",
    )
    mcp_auth_wait_s: float | None = Field(
        default=None,
        gt=0,
        description="SPEC H-06: how long the turn waits for the user to authorise a server.",
    )

    def permits(self, tool_name: str) -> bool:
        """Whether the turn may run ``tool_name``; fail closed when the set is absent."""
        return self.allowed_tools is not None and tool_name in self.allowed_tools

    def permits_skill(self, name: str) -> bool:
        """Whether the turn may use skill ``name``; fail closed when the set is absent."""
        return self.allowed_skills is not None and name in self.allowed_skills


SHOWN_NAME_CHARS = 64
"""How much of a refused tool's name the error repeats (the model chose it: bound it)."""


def tool_not_allowed(tool_name: str, allowed: Collection[str] | None) -> str:
    """The error a call outside the turn's tool set reads: it names only the tools this
    agent may use, never the registry's other tools nor any id (SPEC E-22)."""
    name = repr(tool_name[:SHOWN_NAME_CHARS])
    if allowed is None:
        return f"tool {name} refused: the call does not say which tools this agent may use"
    if not allowed:
        return f"tool {name} is not available: this agent has no tools"
    return f"tool {name} is not available to this agent; its tools: {', '.join(sorted(allowed))}"


OUTCOME_UNKNOWN = "outcome unknown: the call may or may not have run; check before retrying"
"""The error result of a write call whose dispatch no engine replica saw acknowledged
before it stopped: the call is never sent again (invariant 3, SPEC H-05), so the model
reads this stable text and checks the effect before it asks for the call again."""


class ToolCallRequestedData(Payload):
    """Run one tool call before ``deadline``."""

    call_id: str
    tool_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    round: int = Field(ge=0)
    deadline: datetime
    context: ToolContext


class ToolCallCompletedData(Payload):
    """The outcome of one tool call; a failure is a result the model reads, not a crash."""

    call_id: str
    tool_name: str
    success: bool
    output: CleanText = ""
    error: CleanText | None = None
    display_type: str = "text"
    data: CleanJson = Field(default_factory=dict, description="Structured payload.")
    duration_ms: int = Field(default=0, ge=0)
    worker: str = ""


OUTCOME_UNKNOWN_MARK = "outcome_unknown"
"""``ToolCallCompletedData.data[OUTCOME_UNKNOWN_MARK] = True``: a worker found a write call
claimed by a worker that stopped before reporting (SPEC H-05); the engine asks a person."""


def outcome_unknown(result: ToolCallCompletedData) -> bool:
    """Whether a result says that its write may or may not have run."""
    return result.data.get(OUTCOME_UNKNOWN_MARK) is True or result.error == OUTCOME_UNKNOWN


class ToolCallRequested(Envelope):
    """A call on ``tool.calls`` (key = call id) or ``sandbox.calls`` (key = session id)."""

    type: Literal["tool_call_requested"] = "tool_call_requested"
    data: ToolCallRequestedData

    def key(self) -> bytes:
        """Spread one turn's parallel calls over workers."""
        return self.data.call_id.encode()

    def scoped_call_id(self) -> str:
        """The call's id within its tenant and turn: what names one call across every
        turn. The model's own ids are unique only within its response (a provider may
        count ``call_0``, ``call_1``... in every turn), so a worker's record of a call
        (the write-call claims) is keyed by this."""
        return f"{self.tenant_id}:{self.request_id}:{self.data.call_id}"


class ToolCallCompleted(Envelope):
    """A result on ``tool.results`` (key = session id, so a turn's results stay ordered)."""

    type: Literal["tool_call_completed"] = "tool_call_completed"
    data: ToolCallCompletedData


ToolCall = Annotated[ToolCallRequested, Field(discriminator="type")]
ToolResult = Annotated[ToolCallCompleted, Field(discriminator="type")]
