"""Weft's wire contracts: the event envelope, the events and commands on Kafka, topic names.

These pydantic models are the source of truth; ``proto/`` holds the JSON Schemas and the
AsyncAPI document generated from them by ``make proto``.
"""

from weft_contracts.agent import AgentConfig, AgentMode
from weft_contracts.commands import (
    AgentControl,
    AgentRequest,
    CancelRequested,
    CancelRequestedData,
    ChatRequested,
    ChatRequestedData,
    SteerMessage,
    SteerMessageData,
)
from weft_contracts.dlq import DeadLetter, DeadLetterData
from weft_contracts.envelope import SCHEMA_VERSION, Envelope, new_event_id
from weft_contracts.events import (
    AgentEvent,
    AgentStep,
    CompleteData,
    CompleteEvent,
    ErrorData,
    ErrorEvent,
    FinalAnswerData,
    FinalAnswerEvent,
    Reference,
    ReferencesData,
    ReferencesEvent,
    StepToolCall,
    ThoughtData,
    ThoughtEvent,
    ToolCallData,
    ToolCallEvent,
    ToolResultData,
    ToolResultEvent,
    TurnStartedData,
    TurnStartedEvent,
    TurnStatus,
)
from weft_contracts.tools import (
    ToolCallCompleted,
    ToolCallCompletedData,
    ToolCallRequested,
    ToolCallRequestedData,
    ToolContext,
)
from weft_contracts.topics import TOPIC_MODELS, Topic

__all__ = [
    "SCHEMA_VERSION",
    "TOPIC_MODELS",
    "AgentConfig",
    "AgentControl",
    "AgentEvent",
    "AgentMode",
    "AgentRequest",
    "AgentStep",
    "CancelRequested",
    "CancelRequestedData",
    "ChatRequested",
    "ChatRequestedData",
    "CompleteData",
    "CompleteEvent",
    "DeadLetter",
    "DeadLetterData",
    "Envelope",
    "ErrorData",
    "ErrorEvent",
    "FinalAnswerData",
    "FinalAnswerEvent",
    "Reference",
    "ReferencesData",
    "ReferencesEvent",
    "SteerMessage",
    "SteerMessageData",
    "StepToolCall",
    "ThoughtData",
    "ThoughtEvent",
    "ToolCallCompleted",
    "ToolCallCompletedData",
    "ToolCallData",
    "ToolCallEvent",
    "ToolCallRequested",
    "ToolCallRequestedData",
    "ToolContext",
    "ToolResultData",
    "ToolResultEvent",
    "Topic",
    "TurnStartedData",
    "TurnStartedEvent",
    "TurnStatus",
    "new_event_id",
]
