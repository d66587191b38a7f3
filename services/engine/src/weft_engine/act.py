"""Act: the model's tool calls -> pending calls, dispatch groups and Kafka messages.

SPEC E-15: calls run in parallel, but only read-only tools overlap; any other tool is a
barrier that runs alone, after what came before it. SPEC E-16: call ids normalised,
arguments parsed, repaired once when broken, else an error result the model reads.
SPEC A-08: a call of a tool outside the turn's tool set is such an error result too, and
is never published.
SPEC E-17: each call carries a deadline the engine enforces even if no worker answers.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from json_repair import repair_json
from weft_contracts import (
    ToolCallRequested,
    ToolCallRequestedData,
    ToolContext,
    tool_not_allowed,
)
from weft_contracts.text import clean_json
from weft_llm import ToolCallRequest
from weft_tools.specs import offered_tools, spec_by_name

from weft_engine.state import PendingCall, TurnState

ERROR_HINT = "[Analyze the error above and try a different approach.]"
WEB_FETCH_PAGE_BUDGET_S = 180.0
TOOL_TIMEOUTS_S = {"shell_exec": 605.0, "web_fetch": WEB_FETCH_PAGE_BUDGET_S + 5.0}
"""Per-tool deadlines (SPEC E-17); others use the engine's default (60 s)."""


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
    # "\u0000" or a lone "\ud800" escape in the model's JSON would reach tools and storage.
    cleaned: dict[str, Any] = clean_json(value)
    return cleaned


def normalise_call_id(call: ToolCallRequest, state: TurnState, index: int) -> str:
    """A non-empty id unique within the turn, even when the provider sends none."""
    return call.id.strip() or f"call_{state.round}_{index}"


def is_read_only(tool_name: str) -> bool:
    """Unknown tools (sandbox, MCP) are treated as writes: they never overlap."""
    spec = spec_by_name(tool_name)
    return spec is not None and spec.read_only


def plan_calls(
    state: TurnState, calls: list[ToolCallRequest], default_timeout_s: float
) -> tuple[list[PendingCall], dict[str, str]]:
    """Pending calls in the model's order and the errors known before dispatch: a tool
    outside the turn's tool set (SPEC A-08; such a call never leaves the engine, whatever
    the model was talked into) or arguments that are not an object (SPEC E-16)."""
    offered = offered_tools(state.agent.allowed_tools)
    pending: list[PendingCall] = []
    errors: dict[str, str] = {}
    for index, call in enumerate(calls):
        call_id = normalise_call_id(call, state, index)
        try:
            arguments = parse_arguments(call.arguments)
        except ValueError as exc:
            errors[call_id] = f"{exc}\n{ERROR_HINT}"
            arguments = {}
        if call.name not in offered:
            errors[call_id] = tool_not_allowed(call.name, offered)
        timeout = TOOL_TIMEOUTS_S.get(call.name, default_timeout_s)
        pending.append(
            PendingCall(
                call_id=call_id,
                tool_name=call.name,
                arguments=arguments,
                arguments_json=json.dumps(arguments, ensure_ascii=False),
                read_only=is_read_only(call.name),
                timeout_s=timeout,
            )
        )
    return pending, errors


def dispatch_groups(pending: list[PendingCall]) -> list[list[str]]:
    """Consecutive read-only calls share a group; any other call is a group of its own."""
    groups: list[list[str]] = []
    for call in pending:
        if call.read_only and groups and _all_read_only(groups[-1], pending):
            groups[-1].append(call.call_id)
        else:
            groups.append([call.call_id])
    return groups


def _all_read_only(group: list[str], pending: list[PendingCall]) -> bool:
    by_id = {c.call_id: c for c in pending}
    return all(by_id[cid].read_only for cid in group)


def dispatch_messages(
    state: TurnState, call_ids: list[str]
) -> tuple[list[PendingCall], list[ToolCallRequested]]:
    """Give the calls absolute deadlines from now and build their Kafka messages."""
    now = time.time()
    context = ToolContext(
        user_id=state.user_id,
        agent_id=state.agent.agent_id,
        knowledge_base_ids=state.agent.knowledge_base_ids,
        max_output_chars=state.agent.tool_output_max_chars,
        retrieval_tenant_id=state.agent.retrieval_tenant_id,
        key_knowledge_base_ids=state.agent.key_knowledge_base_ids,
        allowed_tools=offered_tools(state.agent.allowed_tools),  # the workers check it too
    )
    updated: list[PendingCall] = []
    messages: list[ToolCallRequested] = []
    for call in state.pending:
        if call.call_id not in call_ids or call.call_id in state.results:
            updated.append(call)
            continue
        deadline = now + call.timeout_s
        updated.append(call.model_copy(update={"deadline": deadline}))
        messages.append(
            ToolCallRequested(
                **state.ids(),
                data=ToolCallRequestedData(
                    call_id=call.call_id,
                    tool_name=call.tool_name,
                    arguments=call.arguments,
                    round=state.round,
                    deadline=datetime.fromtimestamp(deadline, UTC),
                    context=context,
                ),
            )
        )
    return updated, messages
