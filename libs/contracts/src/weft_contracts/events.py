"""The public agent event stream on ``weft.agent.events.v1`` (STYLE principle 3).

One flat model per event type, discriminated on ``type``. Names follow one style:
``thought``, ``final_answer``, ``tool_call``, ``tool_result``, ``references``, ``complete``,
``error``. ``turn_started`` opens every turn and carries the user's message so that
subscribers (memory, suggestions, platform services) need only this topic.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

from weft_contracts.approvals import ToolApprovalRequiredEvent, ToolApprovalResolvedEvent
from weft_contracts.envelope import Envelope, Payload
from weft_contracts.locale import Locale
from weft_contracts.text import CleanJson, CleanText


class TurnStatus(StrEnum):
    """How a turn ended; carried by ``complete``."""

    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


def assistant_message_id(turn_started_id: str) -> str:
    """The id of a turn's assistant message, known from its ``turn_started`` event: memory
    stores the user message under that event's id and the assistant message under the
    same id with an ``a`` appended (it sorts right after the user message)."""
    return turn_started_id + "a"


class TurnStartedData(Payload):
    """The user's message as the engine accepted it."""

    query: CleanText
    user_id: str
    agent_id: str
    mode: Literal["agent", "normal"] = "agent"
    memory_enabled: bool = Field(
        default=False,
        description="The agent's resolved long-term memory switch (SPEC M-10): memory "
        "extracts facts after the turn only when it is on.",
    )
    images: list[str] = Field(
        default_factory=list, description="Images of the message (SPEC E-26), as sent."
    )
    locale: Locale | None = Field(
        default=None, description="The user's language (BCP 47), as the request gave it."
    )


class ThoughtData(Payload):
    """A piece of the model's reasoning (``reasoning_content`` or ``<think>``; E-08)."""

    round: int = Field(ge=0)
    delta: CleanText
    done: bool = False


class SupersededBy(StrEnum):
    """Why a round's streamed text was superseded (``FinalAnswerData.superseded_by``)."""

    STEER = "steer"
    """A steer message made the round's answer an intermediate step (E-13): its answer
    deltas are not the answer; the steps keep them as the round's thought."""
    RERUN = "rerun"
    """The engine replica streaming the round stopped and another one runs the round
    again: every thought and answer delta of that round is void and appears nowhere."""
    STOP = "stop"
    """The user stopped the turn while the round streamed, and a closing answer from the
    tool results gathered follows (E-20): every thought and answer delta of that round is
    void and appears nowhere, as for ``rerun`` (a client that does not know this value
    handles it as ``rerun``)."""


class FinalAnswerData(Payload):
    """A piece of the final answer; ``done`` marks the last piece (E-10, E-12).

    ``superseded`` (with ``done`` and an empty ``delta``) closes a round whose text is not
    part of the answer, for the reason ``superseded_by`` names: the answer is the deltas
    after the last such marker."""

    round: int = Field(ge=0)
    delta: CleanText
    done: bool = False
    truncated: bool = False
    superseded: bool = False
    superseded_by: str = Field(
        default="",
        description="With superseded: steer (a steer message made the round's answer an "
        "intermediate step; drop its answer deltas) or rerun (an engine replica stopped "
        "mid-stream and the round runs again; drop its thought and answer deltas) "
        "(weft_contracts.SupersededBy); empty otherwise. A later version may add reasons: "
        "treat an unknown one as rerun.",
    )


class ToolCallData(Payload):
    """The model asked for a tool (E-18)."""

    round: int = Field(ge=0)
    call_id: str
    tool_name: str
    arguments: CleanJson = Field(default_factory=dict)
    display_hint: str = ""


class ToolResultData(Payload):
    """A tool finished; ``success=false`` is reported and the agent continues (E-18)."""

    round: int = Field(ge=0)
    call_id: str
    tool_name: str
    success: bool
    output: CleanText = ""
    error: CleanText | None = None
    display_type: str = "text"
    duration_ms: int = Field(default=0, ge=0)


class Reference(Payload):
    """A source the answer may cite, by its short alias (E-22)."""

    alias: str
    chunk_id: str
    document_id: str
    knowledge_base_id: str
    title: CleanText = ""
    excerpt: CleanText = ""


class ReferencesData(Payload):
    """Sources gathered during the turn."""

    references: list[Reference]


class StepToolCall(Payload):
    """One tool call of a round, with its outcome, as persisted in agent steps."""

    call_id: str
    tool_name: str
    arguments: CleanJson = Field(default_factory=dict)
    success: bool = False
    output: CleanText = ""
    error: CleanText | None = None
    duration_ms: int = Field(default=0, ge=0)


class AgentStep(Payload):
    """One round of the loop: what the model thought and which tools it called (E-04)."""

    round: int = Field(ge=0)
    thought: CleanText = ""
    reasoning: CleanText = ""
    tool_calls: list[StepToolCall] = Field(default_factory=list)


class TurnUsage(Payload):
    """What a turn consumed, summed over all its model calls: metered per tenant, user
    and agent by memory (``usage`` table) and counted against the tenant's budgets."""

    input_tokens: int = Field(
        default=0, ge=0, description="Prompt tokens, as the provider counted."
    )
    output_tokens: int = Field(default=0, ge=0, description="Completion tokens (with reasoning).")
    llm_calls: int = Field(default=0, ge=0)
    tool_calls: int = Field(default=0, ge=0, description="Tool calls the turn dispatched.")


class CompleteData(Payload):
    """The single terminal event of a turn (E-04)."""

    status: TurnStatus
    final_answer: CleanText = ""
    is_fallback: bool = False
    truncated: bool = False
    rounds: int = Field(default=0, ge=0)
    steps: list[AgentStep] = Field(default_factory=list)
    duration_ms: int = Field(default=0, ge=0)
    usage: TurnUsage = Field(default_factory=TurnUsage)


class ErrorCode(StrEnum):
    """The ``code`` of an ``error`` event: stable, for clients to branch on. The message
    beside it is written for people and never carries a provider's or a service's own
    error text (that stays in logs and traces)."""

    LLM_ERROR = "llm_error"
    """The model failed after its retries and no tool result allowed a rescue answer."""
    HISTORY_UNAVAILABLE = "history_unavailable"
    """The conversation's history could not be loaded (memory unreachable)."""
    SESSION_BUSY = "session_busy"
    """Another turn of the session is running and the request asked not to wait."""
    ENGINE_ERROR = "engine_error"
    """The turn failed on every engine replica that took it over."""
    TURN_DEADLINE_EXCEEDED = "turn_deadline_exceeded"
    """The turn ran past the engine's wall-clock bound before any tool result allowed a
    rescue answer."""
    STREAM_IDLE_TIMEOUT = "stream_idle_timeout"
    """The gateway saw no event of the turn for its idle timeout."""
    STREAM_UNAVAILABLE = "stream_unavailable"
    """The gateway's event stream store (Redis) is unavailable."""
    TURN_STATE_LOST = "turn_state_lost"
    """The engine lost the turn's stored state (Redis emptied or keys evicted); the turn
    was found unfinished from Kafka and PostgreSQL and ended (``TurnAuditor``)."""
    BUDGET_EXCEEDED = "budget_exceeded"
    """The tenant's token budget (per minute or per day) ran out while the turn ran: the
    round in flight finished, the next model call was not made."""


class ErrorData(Payload):
    """A turn-level failure; always followed by ``complete`` with status ``failed``."""

    code: str = Field(
        description="One of llm_error, history_unavailable, session_busy, "
        "engine_error, turn_deadline_exceeded, stream_idle_timeout, "
        "stream_unavailable, turn_state_lost, budget_exceeded "
        "(weft_contracts.ErrorCode); a later version may add codes, so treat an unknown "
        "one as a generic failure."
    )
    message: CleanText = Field(description="For people; never the upstream error text.")
    retryable: bool = Field(default=False, description="Sending the message again may work.")


class ContextCompactedData(Payload):
    """History was summarised to fit the context window (SPEC M-06)."""

    round: int = Field(ge=0)
    tokens_before: int = Field(ge=0)
    tokens_after: int = Field(ge=0)
    reason: str
    split_turn: bool = False
    degraded: bool = False


class RecalledMemory(Payload):
    """One long-term memory fact given to the model."""

    id: str
    content: CleanText
    score: float = 0.0


class MemoryRecalledData(Payload):
    """Long-term memories recalled for this turn (SPEC M-10)."""

    memories: list[RecalledMemory]


class ImagesDescribedData(Payload):
    """SPEC E-26: what the engine put in the query for a chat model without vision."""

    model: str | None = Field(description="The VLM that read the images; None: no VLM.")
    descriptions: list[CleanText] = Field(
        description="One per image of the message, in order; empty when it could not be read."
    )
    note: str = Field(default="", description="Said to the model about unread images.")


class DeliverableData(Payload):
    """A file a tool call created or changed under ``/workspace/output`` (a deliverable),
    reported by the sandbox in its result and announced by the engine."""

    call_id: str
    tool_name: str
    path: CleanText = Field(description="Relative to /workspace, e.g. output/report.md.")
    size: int = Field(ge=0, description="Bytes, as checkpointed.")
    download_path: CleanText = Field(description="Public API path that downloads it.")


class TurnStartedEvent(Envelope):
    """First event of every turn."""

    type: Literal["turn_started"] = "turn_started"
    data: TurnStartedData


class ThoughtEvent(Envelope):
    """Reasoning delta."""

    type: Literal["thought"] = "thought"
    data: ThoughtData


class FinalAnswerEvent(Envelope):
    """Answer delta."""

    type: Literal["final_answer"] = "final_answer"
    data: FinalAnswerData


class ToolCallEvent(Envelope):
    """Tool requested."""

    type: Literal["tool_call"] = "tool_call"
    data: ToolCallData


class ToolResultEvent(Envelope):
    """Tool finished."""

    type: Literal["tool_result"] = "tool_result"
    data: ToolResultData


class ReferencesEvent(Envelope):
    """Citable sources."""

    type: Literal["references"] = "references"
    data: ReferencesData


class CompleteEvent(Envelope):
    """End of the turn."""

    type: Literal["complete"] = "complete"
    data: CompleteData


class ErrorEvent(Envelope):
    """Turn-level error."""

    type: Literal["error"] = "error"
    data: ErrorData


class ContextCompactedEvent(Envelope):
    """History compacted."""

    type: Literal["context_compacted"] = "context_compacted"
    data: ContextCompactedData


class MemoryRecalledEvent(Envelope):
    """Long-term memories recalled."""

    type: Literal["memory_recalled"] = "memory_recalled"
    data: MemoryRecalledData


class ImagesDescribedEvent(Envelope):
    """Images described for a model without vision."""

    type: Literal["images_described"] = "images_described"
    data: ImagesDescribedData


class DeliverableEvent(Envelope):
    """A new or changed deliverable in the session's workspace."""

    type: Literal["deliverable"] = "deliverable"
    data: DeliverableData


AgentEvent = Annotated[
    TurnStartedEvent
    | ThoughtEvent
    | FinalAnswerEvent
    | ToolCallEvent
    | ToolResultEvent
    | ReferencesEvent
    | CompleteEvent
    | ErrorEvent
    | ContextCompactedEvent
    | MemoryRecalledEvent
    | ImagesDescribedEvent
    | DeliverableEvent
    | ToolApprovalRequiredEvent
    | ToolApprovalResolvedEvent,
    Field(discriminator="type"),
]
"""Any message of ``weft.agent.events.v1``."""
