"""Think: one streamed LLM call; deltas go to thought / final-answer events (SPEC E-06..E-08).

The package holds what only thinking uses: ``split`` (``<think>`` blocks), ``coalesce``
(delta windows), ``sanitize`` (messages before each call).

``reasoning_content`` and ``<think>`` blocks become ``thought`` events, visible content
becomes ``final_answer`` events; deltas are coalesced over ``coalesce_window_s``. When
tools follow, that round's content is its preamble: clients take the final answer from
the round of the ``final_answer`` event marked ``done``; a round a steer made
intermediate is closed by one marked ``done`` and ``superseded`` (loop.py).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import structlog
from weft_contracts import FinalAnswerData, FinalAnswerEvent, ThoughtData, ThoughtEvent
from weft_llm import (
    ChatModel,
    LLMCallError,
    LLMRequest,
    LLMResponse,
    TransientLLMError,
    UserMessage,
)

from weft_engine.emitter import EventEmitter
from weft_engine.state import TurnState
from weft_engine.think.coalesce import DeltaCoalescer
from weft_engine.think.sanitize import sanitize_messages
from weft_engine.think.split import ThinkSplitter, ThoughtJoiner
from weft_engine.turn_metrics import round_done
from weft_engine.turn_tools import definitions

log = structlog.get_logger(__name__)


@dataclass(frozen=True, kw_only=True)
class ThinkSettings:
    """How to call the model."""

    retry_backoff_s: tuple[float, ...] = (1.0, 2.0)
    coalesce_window_s: float = 0.03


class _EventSink:
    """Feeds the coalescer; marks the turn as streaming at its first visible delta."""

    def __init__(self, emitter: EventEmitter, state: TurnState, window_s: float):
        self._emitter = emitter
        self._ids = state.ids()
        self._round = state.round
        self._request_id = state.request_id
        self._split = ThinkSplitter()
        self._thoughts = ThoughtJoiner()
        self._coalescer = DeltaCoalescer(self._emit, window_s)
        self.emitted = False

    async def _emit(self, kind: str, text: str) -> None:
        if not self.emitted:
            self.emitted = True
            await self._emitter.started_streaming(self._request_id, self._round)
        if kind == "thought":
            data: Any = ThoughtData(round=self._round, delta=text)
            await self._emitter.emit(ThoughtEvent, self._ids, data, wait=False)
        else:
            data = FinalAnswerData(round=self._round, delta=text)
            await self._emitter.emit(FinalAnswerEvent, self._ids, data, wait=False)

    async def on_reasoning(self, delta: str) -> None:
        await self._coalescer.add("thought", self._thoughts.add("reasoning", delta))

    async def on_content(self, delta: str) -> None:
        await self._route(self._split.feed(delta))

    async def _route(self, split: Any) -> None:
        await self._coalescer.add("thought", self._thoughts.add("think", split.thought))
        await self._coalescer.add("answer", split.content)

    async def close(self) -> None:
        await self._route(self._split.flush())
        await self._coalescer.flush()


async def think(
    state: TurnState,
    model: ChatModel,
    emitter: EventEmitter,
    tools: list[dict[str, Any]],
    settings: ThinkSettings,
    *,
    tool_choice: str | None = None,
    reasoning_effort: str | None,
) -> LLMResponse:
    """Call the model, retrying transient failures with backoff (SPEC E-07); a cancel
    during the backoff stops at once (the sleep is cancellable). ``reasoning_effort``:
    the agent's (a round) or its synthesis effort (a closing call, SPEC E-21)."""
    agent = state.agent
    request = LLMRequest(
        model=agent.model,
        messages=sanitize_messages(state.messages),
        tools=tools,
        temperature=agent.temperature,
        max_completion_tokens=agent.max_completion_tokens,
        stall_timeout_s=agent.llm_call_timeout_s,
        tool_choice=tool_choice,
        reasoning_effort=reasoning_effort,
    )
    for attempt, pause in enumerate((*settings.retry_backoff_s, None)):
        sink = _EventSink(emitter, state, settings.coalesce_window_s)
        try:
            response = await model.stream(request, sink)
            await sink.close()
            return _without_think_blocks(response)
        except TransientLLMError as exc:
            await sink.close()
            if pause is None or sink.emitted:
                raise
            log.warning("llm_retry", attempt=attempt + 1, error=str(exc))
            await asyncio.sleep(pause)
        except LLMCallError:  # final: retrying the same request cannot help
            await sink.close()
            raise
    raise AssertionError("unreachable")


class Thinker:
    """A turn's model calls: a round's, with the agent's tools and effort, and a closing
    synthesis's, without tools."""

    def __init__(self, model: ChatModel, emitter: EventEmitter, settings: ThinkSettings):
        self._model = model
        self._emitter = emitter
        self._settings = settings

    async def round(self, state: TurnState) -> LLMResponse:
        """The round's call: the agent's tools, at its reasoning effort."""
        started = time.perf_counter()
        response = await self._call(state, closing=False, thinking=True)
        round_done(time.perf_counter() - started)
        return response

    async def closing(self, state: TurnState, reason: str, *, thinking: bool) -> LLMResponse:
        """A last answer from what was gathered: ``reason`` and the closing request join
        the messages, the call offers no tool (``tool_choice=none``) and, unless
        ``thinking``, runs at the agent's synthesis effort (SPEC E-21: thinking off)."""
        closing = state.model_copy(update={"messages": [*state.messages, closing_request(reason)]})
        return await self._call(closing, closing=True, thinking=thinking)

    async def _call(self, state: TurnState, *, closing: bool, thinking: bool) -> LLMResponse:
        agent = state.agent
        tools = definitions(agent, state.mcp_tools)
        choice = "none" if closing and tools else None
        effort = agent.reasoning_effort if thinking else agent.synthesis_reasoning_effort
        return await think(
            state, self._model, self._emitter, tools, self._settings,
            tool_choice=choice, reasoning_effort=effort,
        )  # fmt: skip


def closing_request(reason: str) -> UserMessage:
    """The extra user message of a final synthesis (SPEC E-21)."""
    return {
        "role": "user",
        "content": (
            f"{reason} Do not call any tool. Answer now, as completely as you can, with what "
            "you have gathered so far, and cite the sources you used."
        ),
    }


def _without_think_blocks(response: LLMResponse) -> LLMResponse:
    """The response's content with ``<think>`` blocks moved to its reasoning, joined as
    the thought events streamed them (models send reasoning_content before content)."""
    if "<think>" not in response.content:
        return response
    splitter = ThinkSplitter()
    first, last = splitter.feed(response.content), splitter.flush()
    thoughts = ThoughtJoiner()
    thoughts.add("reasoning", response.reasoning)
    thoughts.add("think", first.thought + last.thought)
    return LLMResponse(
        content=first.content + last.content,
        reasoning=thoughts.text,
        tool_calls=response.tool_calls,
        finish_reason=response.finish_reason,
        usage=response.usage,
    )
