"""Turn states with a history, for the engine's pure functions."""

from __future__ import annotations

import time

from weft_contracts import AgentConfig
from weft_engine.prompt import initial_messages
from weft_engine.state import TurnState
from weft_llm import ChatMessage, ContentPart, ToolCall


def with_history(agent: AgentConfig, turns: int, query: str) -> TurnState:
    """A turn asking ``query`` after ``turns`` earlier turns, each one search round
    (user ``q<i>``, a ``search_knowledge`` call, its result, answer ``a<i>``)."""
    history: list[ChatMessage] = []
    for i in range(turns):
        history += [
            {"role": "user", "content": f"q{i}"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": f"k{i}", "type": "function",
             "function": {"name": "search_knowledge", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"k{i}", "content": "passages"},
            {"role": "assistant", "content": f"a{i}"},
        ]  # fmt: skip
    return TurnState(
        tenant_id="t", session_id="s", request_id="r", user_id="u", agent=agent,
        messages=initial_messages(agent, history, query), started_at=time.time(),
    )  # fmt: skip


def text(message: ChatMessage) -> str:
    """The plain-text content of ``message`` (fails on parts or ``None``)."""
    content = message["content"]
    assert isinstance(content, str), content
    return content


def parts(message: ChatMessage) -> list[ContentPart]:
    """The content parts of a multimodal user message (fails on any other message)."""
    assert message["role"] == "user" and isinstance(message["content"], list), message
    return message["content"]


def tool_calls(message: ChatMessage) -> list[ToolCall]:
    """The tool calls of an assistant message (fails on any other message)."""
    assert message["role"] == "assistant", message
    return message.get("tool_calls", [])
