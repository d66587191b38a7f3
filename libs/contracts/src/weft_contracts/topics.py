"""Kafka topic names and which message union each carries."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from weft_contracts.commands import AgentControl, AgentRequest
from weft_contracts.dlq import DeadLetterRecord
from weft_contracts.events import AgentEvent
from weft_contracts.notices import SessionNotice
from weft_contracts.tools import ToolCall, ToolResult


class Topic(StrEnum):
    """Every topic of Weft; all keyed by session id except ``TOOL_CALLS`` (call id)."""

    AGENT_REQUESTS = "weft.agent.requests.v1"
    AGENT_CONTROL = "weft.agent.control.v1"
    AGENT_EVENTS = "weft.agent.events.v1"
    TOOL_CALLS = "weft.tool.calls.v1"
    SANDBOX_CALLS = "weft.sandbox.calls.v1"
    TOOL_RESULTS = "weft.tool.results.v1"
    SESSION_NOTICES = "weft.session.notices.v1"
    DLQ = "weft.dlq.v1"


TOPIC_MODELS: dict[Topic, Any] = {
    Topic.AGENT_REQUESTS: AgentRequest,
    Topic.AGENT_CONTROL: AgentControl,
    Topic.AGENT_EVENTS: AgentEvent,
    Topic.TOOL_CALLS: ToolCall,
    Topic.SANDBOX_CALLS: ToolCall,
    Topic.TOOL_RESULTS: ToolResult,
    Topic.SESSION_NOTICES: SessionNotice,
    Topic.DLQ: DeadLetterRecord,
}
"""The (annotated) union type a consumer of each topic decodes with ``TypeAdapter``."""
