"""Commands from the gateway to the engine: ``agent.requests`` and ``agent.control``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from weft_contracts.agent import AgentConfig
from weft_contracts.approvals import ApprovalDecided
from weft_contracts.envelope import Envelope, Payload
from weft_contracts.locale import Locale
from weft_contracts.text import CleanText

DoubleTexting = Literal["reject", "enqueue", "interrupt"]
"""What to do with a new message while the session already runs a turn."""


class QuestionOrigin(Payload):
    """The suggested question a user clicked to send this message (SPEC Q-03). For a
    knowledge suggestion the gateway has already retrieved its source (from the stored
    set, within the caller's knowledge scope): the engine gives it to the model as context
    of this turn, so the answer starts from that source."""

    assistant_message_id: str = Field(min_length=1, max_length=128)
    question_id: str = Field(min_length=1, max_length=64)
    source: Literal["curated", "knowledge", "generated"]
    document_id: str | None = Field(default=None, max_length=128)
    chunk_id: str | None = Field(default=None, max_length=128)
    knowledge_base_id: str | None = Field(default=None, max_length=128)
    title: CleanText = Field(default="", max_length=500)
    excerpt: CleanText = Field(
        default="", max_length=12_000, description="The source's text, as retrieved."
    )


class TurnBudget(Payload):
    """The token budgets that apply to a turn's tenant (docs/budgets.md), as the gateway
    read them when it admitted the turn: the engine checks them before each model call
    and reads no database for them. 0: unlimited."""

    tokens_per_minute: int = Field(default=0, ge=0)
    tokens_per_day: int = Field(default=0, ge=0)


class ChatRequestedData(Payload):
    """A user message to answer, with the agent snapshot it must run with."""

    query: str = Field(min_length=1, max_length=100_000)
    user_id: str
    mode: Literal["agent", "normal"] = "agent"
    agent: AgentConfig
    attachments: list[str] = Field(default_factory=list)
    images: list[str] = Field(
        default_factory=list,
        max_length=32,
        description="Images of the user's message (SPEC E-26): https URLs or "
        "data:image/...;base64 URIs, validated by the gateway.",
    )
    mentions: list[str] = Field(default_factory=list)
    double_texting: DoubleTexting = "enqueue"
    question_origin: QuestionOrigin | None = None
    locale: Locale | None = Field(
        default=None,
        description="The user's language (BCP 47), from the request or its "
        "Accept-Language; None: the deployment's default.",
    )
    deadline: datetime | None = Field(
        default=None,
        description="SPEC E-20: when the turn must have ended, counted from the request "
        "(the gateway's WEFT_TURN_DEADLINE_S); the turn's credential expires then too. "
        "The engine ends the turn at this time or at its own bound, whichever is first. "
        "None (an older gateway): the engine's bound alone.",
    )
    budget: TurnBudget | None = Field(
        default=None,
        description="The tenant's token budgets when the turn was admitted (the "
        "defaults overridden by its own row); None (an older gateway): the engine's "
        "configured defaults.",
    )


class CancelRequestedData(Payload):
    """The user pressed stop."""

    reason: str = "user_stop"


class SteerMessageData(Payload):
    """A message to inject into the running turn (E-13)."""

    content: str = Field(min_length=1, max_length=100_000)


class ChatRequested(Envelope):
    """Start a turn."""

    type: Literal["chat_requested"] = "chat_requested"
    data: ChatRequestedData


class CancelRequested(Envelope):
    """Stop a running turn."""

    type: Literal["cancel_requested"] = "cancel_requested"
    data: CancelRequestedData


class SteerMessage(Envelope):
    """Steer a running turn."""

    type: Literal["steer_message"] = "steer_message"
    data: SteerMessageData


AgentRequest = Annotated[ChatRequested, Field(discriminator="type")]
"""Any message of ``weft.agent.requests.v1``."""

AgentControl = Annotated[
    CancelRequested | SteerMessage | ApprovalDecided, Field(discriminator="type")
]
"""Any message of ``weft.agent.control.v1``."""
