"""The summary call (SPEC M-04): streamed with the stall timeout, two attempts, and the
degraded archive of the original messages when it cannot produce a summary."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from weft_context.tokens import TokenEstimator, message_text
from weft_llm import ChatMessage, ChatModel, LLMCallError, LLMRequest

from weft_engine.compaction.settings import CompactionSettings

log = logging.getLogger(__name__)

SUMMARY_SYSTEM_PROMPT = (
    "You compact the history of a conversation between a user and an AI agent that uses "
    "tools. Write a structured summary that lets the agent continue the work without the "
    "original messages: the user's goals and constraints, decisions taken, facts and "
    "results obtained from tools (with identifiers, numbers and names kept exactly), what "
    "is done, what remains, and open questions. If a previous summary is given, merge it: "
    "keep what is still relevant, update what changed. Answer with the summary only."
)
SPLIT_TURN_PROMPT = (
    "The transcript below is the first part of the current turn, which is too long to keep "
    "whole. Summarise what was asked and what the agent did and found so far, so the agent "
    "can continue this turn from where the kept messages start."
)


class _Discard:
    """Stream sink of the summary call: reasoning is progress, not summary (M-04)."""

    async def on_reasoning(self, delta: str) -> None:
        """Ignored."""

    async def on_content(self, delta: str) -> None:
        """Collected by the model's response already."""


@dataclass(frozen=True, kw_only=True)
class SummaryOutcome:
    """A summary, or a degraded archive when the model failed twice."""

    text: str
    degraded: bool


def render_transcript(messages: Sequence[ChatMessage]) -> str:
    """Messages as plain text for the summariser."""
    lines = []
    for m in messages:
        role = m["role"]
        if m["role"] == "tool":
            lines.append(f"[tool result {m['tool_call_id']}]\n{m['content']}")
            continue
        content = m["content"]
        body = content if isinstance(content, str) else message_text(m)
        tool_calls = m.get("tool_calls", []) if m["role"] == "assistant" else []
        calls = [
            f"{c['function']['name']}({_args(c['function']['arguments'])})" for c in tool_calls
        ]
        if calls:
            body += ("\n" if body else "") + "[tool calls] " + "; ".join(calls)
        lines.append(f"[{role}]\n{body}")
    return "\n\n".join(lines)


def _args(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


class Summarizer:
    """Asks the model for a summary; never raises for a model failure."""

    def __init__(self, model: ChatModel, settings: CompactionSettings, estimator: TokenEstimator):
        self._model = model
        self._settings = settings
        self._estimator = estimator

    async def summarize(
        self,
        messages: Sequence[ChatMessage],
        *,
        previous: str | None = None,
        instruction: str = "",
        omitted: int = 0,
    ) -> SummaryOutcome:
        """Summarise ``messages`` (merging ``previous``); archive them if the model fails."""
        request = self._request(messages, previous, instruction, omitted)
        for attempt in range(1, self._settings.attempts + 1):
            try:
                response = await self._model.stream(request, _Discard())
            except LLMCallError as exc:
                log.warning("summary attempt %d failed: %s", attempt, exc)
                continue
            text = response.content.strip()
            if text and response.finish_reason != "length":
                return SummaryOutcome(text=text, degraded=False)
            log.warning("summary attempt %d gave no usable text", attempt)
        return SummaryOutcome(text=self.archive(messages, previous, omitted), degraded=True)

    def _request(
        self,
        messages: Sequence[ChatMessage],
        previous: str | None,
        instruction: str,
        omitted: int,
    ) -> LLMRequest:
        parts = []
        if instruction:
            parts.append(instruction)
        if previous:
            parts.append(f"<previous_summary>\n{previous}\n</previous_summary>")
        if omitted:
            parts.append(f"({omitted} older message(s) omitted: too long for one request.)")
        parts.append(f"<transcript>\n{render_transcript(messages)}\n</transcript>")
        prompt: list[ChatMessage] = [
            {"role": "system", "content": SUMMARY_SYSTEM_PROMPT},
            {"role": "user", "content": "\n\n".join(parts)},
        ]
        return LLMRequest(
            model=self._settings.model,
            messages=prompt,
            temperature=0.2,
            max_completion_tokens=self._settings.summary_budget,
            stall_timeout_s=self._settings.stall_timeout_s,
        )

    def archive(
        self, messages: Sequence[ChatMessage], previous: str | None, omitted: int = 0
    ) -> str:
        """The degraded fallback: the most recent original messages that fit the summary
        budget, verbatim, with a note of how many were left out (SPEC M-04)."""
        budget = self._settings.summary_budget
        if previous:
            budget -= self._estimator.text_tokens(previous)
        kept: list[ChatMessage] = []
        for message in reversed(messages):
            cost = self._estimator.message_tokens(message)
            if cost > budget:
                break
            kept.append(message)
            budget -= cost
        dropped = len(messages) - len(kept) + omitted
        parts = ["[Summary unavailable: archive of the original messages.]"]
        if previous:
            parts.append(previous)
        if dropped:
            parts.append(f"[{dropped} earlier message(s) omitted.]")
        if kept:
            parts.append(render_transcript(list(reversed(kept))))
        return "\n\n".join(parts)
