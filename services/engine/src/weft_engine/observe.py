"""Observe: fold a round's tool results back into the conversation (SPEC E-19)."""

from __future__ import annotations

from collections.abc import Iterable

import structlog
from pydantic import ValidationError
from weft_contracts import AgentStep, StepToolCall, ToolCallCompletedData
from weft_llm import AssistantMessage, ToolMessage

from weft_engine.state import FaqMatch, TurnState
from weft_engine.turn_tools import publish

ERROR_HINT = "[Analyze the error above and try a different approach.]"
"""Ends every tool error the model reads (SPEC E-16, E-19)."""

log = structlog.get_logger(__name__)


def faq_matches(results: Iterable[ToolCallCompletedData]) -> list[FaqMatch]:
    """The FAQ entries ``search_knowledge`` results carry (``data["faq"]``); a malformed
    one is left out and logged (the turn goes on: it only loses a direct answer)."""
    found: list[FaqMatch] = []
    for result in results:
        if result.tool_name != "search_knowledge" or not result.success:
            continue
        for raw in result.data.get("faq") or []:
            try:
                found.append(FaqMatch.model_validate(raw))
            except ValidationError:
                log.warning("faq_match_malformed", call_id=result.call_id)
    return found


def observe(state: TurnState) -> TurnState:
    """Append the assistant message with tool_calls and one ``tool`` message per result,
    in the original order; record the round's step; move to the next round."""
    assistant: AssistantMessage = {
        "role": "assistant",
        "content": state.preamble,
        "tool_calls": [
            {
                "id": c.call_id,
                "type": "function",
                "function": {"name": c.tool_name, "arguments": c.arguments_json},
            }
            for c in state.pending
        ],
    }
    tool_messages: list[ToolMessage] = []
    step_calls = []
    for call in state.pending:
        result = state.results[call.call_id]
        content = result.output if result.success else f"Error: {result.error}\n{ERROR_HINT}"
        tool_messages.append({"role": "tool", "tool_call_id": call.call_id, "content": content})
        step_calls.append(
            StepToolCall(
                call_id=call.call_id,
                tool_name=call.tool_name,
                arguments=call.arguments,
                success=result.success,
                output=result.output,
                error=result.error,
                duration_ms=result.duration_ms,
            )
        )
    step = AgentStep(
        round=state.round, thought=state.preamble, reasoning=state.reasoning, tool_calls=step_calls
    )
    return state.model_copy(
        update={
            "messages": [*state.messages, assistant, *tool_messages],
            "steps": [*state.steps, step],
            "round": state.round + 1,
            # SPEC T-19: tools described this round are offered from the next one.
            "mcp_tools": publish(state.agent, state.mcp_tools, state.results.values()),
            "faq_matches": [*state.faq_matches, *faq_matches(state.results.values())],
            "pending": [],
            "results": {},
            "groups": [],
            "dispatched_groups": 0,
            "phase": "think",
            "preamble": "",
            "reasoning": "",
        }
    )
