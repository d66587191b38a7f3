"""In-process model doubles for unit tests: a :class:`FunctionModel` asks a function for
each response and streams it to the engine's sink as a provider would.

The scripted OpenAI-compatible server (``weft_scripted_llm``) stays the double of the
integration and e2e tests, reached over HTTP through the real ``openai`` client; this one
needs no socket, so a unit test can drive every branch of the loop in microseconds.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from weft_llm import FinishReason, LLMRequest, LLMResponse, StreamSink, ToolCallRequest, Usage

Reply = LLMResponse | BaseException
"""What the function decides: a response to stream, or an error to raise (for example an
:class:`weft_llm.LLMCallError`)."""

ReplyFunction = Callable[["ModelCall"], Reply | Awaitable[Reply]]


@dataclass(frozen=True, kw_only=True)
class ModelCall:
    """One request the double received, with its position among all of them."""

    index: int
    """0 for the first request the model got, 1 for the next, ..."""
    request: LLMRequest

    @property
    def last_message(self) -> Mapping[str, Any]:
        """The request's last message (the user's question, a nudge, a tool result)."""
        return self.request.messages[-1] if self.request.messages else {}


@dataclass(kw_only=True)
class FunctionModel:
    """A :class:`weft_llm.ChatModel` whose responses come from ``reply``.

    The chosen response's reasoning, then its content, reach the sink in pieces of
    ``chunk_chars`` characters, so streaming code sees several deltas; a raised or returned
    exception is raised before anything is streamed. Every request is kept in ``calls``.
    """

    reply: ReplyFunction
    chunk_chars: int = 8
    calls: list[ModelCall] = field(default_factory=list)

    async def stream(self, request: LLMRequest, sink: StreamSink) -> LLMResponse:
        """Stream the response ``reply`` picks for ``request``."""
        call = ModelCall(index=len(self.calls), request=request)
        self.calls.append(call)
        chosen = self.reply(call)
        if inspect.isawaitable(chosen):
            chosen = await chosen
        if isinstance(chosen, BaseException):
            raise chosen
        for piece in _pieces(chosen.reasoning, self.chunk_chars):
            await sink.on_reasoning(piece)
        for piece in _pieces(chosen.content, self.chunk_chars):
            await sink.on_content(piece)
        return chosen

    @property
    def requests(self) -> list[LLMRequest]:
        """The requests received, in order."""
        return [c.request for c in self.calls]


def replies(*script: Reply, chunk_chars: int = 8) -> FunctionModel:
    """A model that answers its requests with ``script`` in order, and fails the test with
    a clear message when asked once more than scripted."""

    def next_reply(call: ModelCall) -> Reply:
        if call.index >= len(script):
            raise AssertionError(
                f"the model was asked {call.index + 1} times, scripted for {len(script)}"
            )
        return script[call.index]

    return FunctionModel(reply=next_reply, chunk_chars=chunk_chars)


def queued(pending: list[Reply], *, chunk_chars: int = 8) -> FunctionModel:
    """A model that answers each request with the head of ``pending`` (taken off it). The
    list is the test's own: a fixture can build the model into an app and each test script
    it afterwards. Asked with ``pending`` empty, it fails the test with a clear message."""

    def next_reply(call: ModelCall) -> Reply:
        if not pending:
            raise AssertionError(f"the model was asked {call.index + 1} times, nothing queued")
        return pending.pop(0)

    return FunctionModel(reply=next_reply, chunk_chars=chunk_chars)


def answer(
    content: str,
    *,
    reasoning: str = "",
    finish_reason: FinishReason = "stop",
    usage: Usage | None = None,
) -> LLMResponse:
    """A response without tool calls."""
    return LLMResponse(
        content=content, reasoning=reasoning, tool_calls=[], finish_reason=finish_reason,
        usage=usage,
    )  # fmt: skip


def tool_calls(
    *calls: tuple[str, dict[str, Any] | str],
    content: str = "",
    reasoning: str = "",
    finish_reason: FinishReason = "tool_calls",
    ids: Sequence[str] | None = None,
) -> LLMResponse:
    """A response calling ``(tool name, arguments)`` pairs; arguments given as a string are
    sent as they are (broken JSON included), a dict as its JSON."""
    requests = [
        ToolCallRequest(
            id=ids[i] if ids else f"call_{i}",
            name=name,
            arguments=args if isinstance(args, str) else json.dumps(args),
        )
        for i, (name, args) in enumerate(calls)
    ]
    return LLMResponse(
        content=content, reasoning=reasoning, tool_calls=requests, finish_reason=finish_reason
    )


def _pieces(text: str, size: int) -> list[str]:
    step = max(1, size)
    return [text[i : i + step] for i in range(0, len(text), step)]
