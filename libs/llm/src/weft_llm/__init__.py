"""The LLM behind a small protocol (STYLE principle 6) and its OpenAI-compatible client."""

from weft_llm.model import (
    ChatModel,
    LLMCallError,
    LLMRequest,
    LLMResponse,
    StreamSink,
    ToolCallRequest,
    Usage,
)
from weft_llm.openai_model import OpenAIChatModel, wire_reasoning_effort

__all__ = [
    "ChatModel",
    "LLMCallError",
    "LLMRequest",
    "LLMResponse",
    "OpenAIChatModel",
    "StreamSink",
    "ToolCallRequest",
    "Usage",
    "wire_reasoning_effort",
]
