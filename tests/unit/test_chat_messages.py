"""The messages the engine builds have the shapes weft_llm's TypedDicts declare, so the
types describe what is sent (system, user with image parts, assistant with tool calls,
tool results; SPEC E-19, E-26)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, get_args, get_type_hints

from weft_contracts import AgentConfig, ToolCallCompletedData
from weft_engine.act import plan_calls
from weft_engine.observe import observe
from weft_engine.prompt import initial_messages
from weft_engine.state import TurnState
from weft_llm import ChatMessage, ImagePart, TextPart, ToolCall, ToolCallRequest

ROLES = get_args(get_args(ChatMessage)[0])  # ChatMessage is Annotated[<union>, discriminator]
BY_ROLE = {get_args(get_type_hints(t)["role"])[0]: t for t in ROLES}


def _has_shape(value: Mapping[str, Any], typed: Any) -> bool:
    keys = set(value)
    required: frozenset[str] = typed.__required_keys__
    optional: frozenset[str] = typed.__optional_keys__
    return required <= keys <= required | optional


def _conforms(message: Mapping[str, Any]) -> bool:
    if not _has_shape(message, BY_ROLE[message["role"]]):
        return False
    content = message["content"]
    if isinstance(content, list):
        kinds = {"text": TextPart, "image_url": ImagePart}
        if not all(_has_shape(p, kinds[p["type"]]) for p in content):
            return False
    return all(_has_shape(c, ToolCall) for c in message.get("tool_calls", []))


def test_the_roles_are_the_four_of_the_wire() -> None:
    assert set(BY_ROLE) == {"system", "user", "assistant", "tool"}


def test_built_messages_conform_to_their_types() -> None:
    agent = AgentConfig(agent_id="a", model="m", vision=True, allowed_tools=["search_knowledge"])
    messages = initial_messages(
        agent, [], "what is this?", "s", images=["data:image/png;base64,AA"]
    )
    state = TurnState(
        tenant_id="t", session_id="s", request_id="r", user_id="u", agent=agent,
        messages=messages, started_at=time.time(),
    )  # fmt: skip
    calls = [ToolCallRequest(id="c1", name="search_knowledge", arguments='{"query": "a"}')]
    pending, _ = plan_calls(state, calls, 60)
    result = ToolCallCompletedData(call_id="c1", tool_name="search_knowledge", success=True)
    after = observe(state.model_copy(update={"pending": pending, "results": {"c1": result}}))
    assert [m["role"] for m in after.messages] == ["system", "user", "assistant", "tool"]
    assert all(_conforms(m) for m in after.messages), after.messages


def test_a_malformed_message_does_not_conform() -> None:
    assert not _conforms({"role": "tool", "content": "x"})  # no tool_call_id
    assert not _conforms({"role": "user", "content": [{"type": "image_url", "url": "u"}]})
