"""The LLM behind a small protocol (STYLE principle 6) and its OpenAI-compatible client."""

from weft_llm.model import (
    FINISH_REASONS,
    ChatModel,
    ContextOverflowError,
    FinishReason,
    LLMCallError,
    LLMRequest,
    LLMResponse,
    ModelStalledError,
    StreamSink,
    ToolCallRequest,
    TransientLLMError,
    Usage,
    finish_reason,
)
from weft_llm.openai_model import OpenAIChatModel, wire_reasoning_effort

__all__ = [
    "FINISH_REASONS",
    "ChatModel",
    "ContextOverflowError",
    "FinishReason",
    "LLMCallError",
    "LLMRequest",
    "LLMResponse",
    "ModelStalledError",
    "OpenAIChatModel",
    "StreamSink",
    "ToolCallRequest",
    "TransientLLMError",
    "Usage",
    "finish_reason",
    "wire_reasoning_effort",
]
