"""Act: turn the model's tool calls into ``ToolCallRequested`` messages (SPEC E-16)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from json_repair import repair_json
from weft_contracts import ToolCallRequested, ToolCallRequestedData, ToolContext
from weft_llm import ToolCallRequest

from weft_engine.state import PendingCall, TurnState

ERROR_HINT = "[Analyze the error above and try a different approach.]"


class ArgumentsError(ValueError):
    """The model's arguments are not a JSON object, even after repair."""


def parse_arguments(raw: str) -> dict[str, Any]:
    """Parse JSON arguments; repair them once when broken (SPEC E-16)."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = repair_json(raw, return_objects=True)
    if not isinstance(value, dict):
        raise ArgumentsError(f"tool arguments must be a JSON object, got: {raw[:200]}")
    return value


def normalise_call_id(call: ToolCallRequest, state: TurnState, index: int) -> str:
    """A non-empty id unique within the turn, even when the provider sends none."""
    return call.id.strip() or f"call_{state.round}_{index}"


def plan_calls(
    state: TurnState, calls: list[ToolCallRequest], deadline_s: float
) -> tuple[list[PendingCall], list[ToolCallRequested], dict[str, str]]:
    """Pending calls in order, the messages to publish, and immediate argument errors."""
    pending: list[PendingCall] = []
    messages: list[ToolCallRequested] = []
    errors: dict[str, str] = {}
    deadline = datetime.now(UTC) + timedelta(seconds=deadline_s)
    context = ToolContext(
        user_id=state.user_id,
        agent_id=state.agent.agent_id,
        knowledge_base_ids=state.agent.knowledge_base_ids,
        max_output_chars=state.agent.tool_output_max_chars,
    )
    for index, call in enumerate(calls):
        call_id = normalise_call_id(call, state, index)
        try:
            arguments = parse_arguments(call.arguments)
        except (ArgumentsError, ValueError) as exc:
            errors[call_id] = f"{exc}\n{ERROR_HINT}"
            arguments = {}
        pending.append(
            PendingCall(
                call_id=call_id,
                tool_name=call.name,
                arguments=arguments,
                arguments_json=json.dumps(arguments, ensure_ascii=False),
            )
        )
        if call_id not in errors:
            messages.append(
                ToolCallRequested(
                    tenant_id=state.tenant_id,
                    session_id=state.session_id,
                    request_id=state.request_id,
                    traceparent=state.traceparent,
                    data=ToolCallRequestedData(
                        call_id=call_id,
                        tool_name=call.name,
                        arguments=arguments,
                        round=state.round,
                        deadline=deadline,
                        context=context,
                    ),
                )
            )
    return pending, messages, errors
