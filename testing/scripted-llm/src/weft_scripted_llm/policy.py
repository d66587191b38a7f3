"""The policies deciding what the test double answers: script playback or the demo policy."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Protocol

from weft_scripted_llm.citations import answer_reasoning, cited_answer, parse_search_hits
from weft_scripted_llm.conversation import (
    asks_for_summary,
    last_user_index,
    last_user_text,
    question_to_rewrite,
    tool_messages_after_last_user,
)
from weft_scripted_llm.openai_schema import ChatCompletionRequest
from weft_scripted_llm.reply import Faults, Reply, ToolCallReply
from weft_scripted_llm.script import Script, ScriptStep
from weft_scripted_llm.summary import summarize
from weft_scripted_llm.tokens import split_words

SEARCH_TOOL = "search_knowledge"
EXHAUSTED_MESSAGE = "scripted LLM: script exhausted"


class ScriptExhaustedError(Exception):
    """No unconsumed step can answer the request."""


class Policy(Protocol):
    """Decides the reply to a chat completion request."""

    name: str

    def reply(self, request: ChatCompletionRequest, conversation_key: str | None) -> Reply: ...

    def status(self) -> dict[str, Any]: ...


def take_step(queue: list[ScriptStep], user_text: str) -> ScriptStep | None:
    """Remove and return the step answering `user_text`.

    The first unconsumed step whose `match` occurs in the text wins; otherwise the first
    unconsumed step without `match`. Steps with a `match` never answer other requests.
    """
    for index, step in enumerate(queue):
        if step.matches(user_text):
            return queue.pop(index)
    for index, step in enumerate(queue):
        if step.match is None:
            return queue.pop(index)
    return None


class ScriptPolicy:
    """Plays a script back: each step answers one request and is consumed."""

    name = "script"

    def __init__(self, script: Script, words_per_chunk: int) -> None:
        self._global = list(script.steps)
        self._conversations = {key: list(steps) for key, steps in script.conversations.items()}
        self._words_per_chunk = words_per_chunk
        self._served = 0
        self._fallback: DemoPolicy | RoundsPolicy | None = None
        if script.fallback == "demo":
            self._fallback = DemoPolicy(words_per_chunk)
        elif script.fallback == "rounds":
            self._fallback = RoundsPolicy(
                script.rounds,
                script.parallel,
                words_per_chunk,
                tool=script.rounds_tool,
                arguments=script.rounds_arguments,
                answer=script.rounds_answer,
                chunk_delay_ms=script.rounds_chunk_delay_ms,
            )

    def _queue(self, conversation_key: str | None) -> list[ScriptStep]:
        if conversation_key is not None and conversation_key in self._conversations:
            return self._conversations[conversation_key]
        return self._global

    def reply(self, request: ChatCompletionRequest, conversation_key: str | None) -> Reply:
        step = take_step(self._queue(conversation_key), last_user_text(request))
        if step is None and self._fallback is not None:
            return self._fallback.reply(request, conversation_key)
        if step is None:
            where = f" for conversation {conversation_key!r}" if conversation_key else ""
            raise ScriptExhaustedError(f"{EXHAUSTED_MESSAGE}{where}: no unconsumed step matches")
        self._served += 1
        return step.to_reply(
            call_id_prefix=f"call_scripted_{self._served}", words_per_chunk=self._words_per_chunk
        )

    def status(self) -> dict[str, Any]:
        return {
            "policy": self.name,
            "served": self._served,
            "remaining": len(self._global),
            "remaining_by_conversation": {k: len(v) for k, v in self._conversations.items()},
        }


class DemoPolicy:
    """The offline demo policy: search the knowledge base, then answer citing the results."""

    name = "demo"

    def __init__(self, words_per_chunk: int) -> None:
        self._words_per_chunk = words_per_chunk

    def status(self) -> dict[str, Any]:
        return {"policy": self.name}

    def reply(self, request: ChatCompletionRequest, conversation_key: str | None) -> Reply:
        question = last_user_text(request).strip()
        tool_results = tool_messages_after_last_user(request)
        if tool_results:
            output = "\n".join(m.text() for m in tool_results)
            return self._answer_from_search(question, output)
        if SEARCH_TOOL in request.tool_names():
            return self._search_call(request, question)
        rewrite = question_to_rewrite(request)
        if rewrite is not None:  # the demo treats every question as standalone already
            return self._text_reply(rewrite, "The question needs no context to be searched.")
        if asks_for_summary(request):
            return self._text_reply(summarize(request), "The user wants a short summary.")
        return self._text_reply(_echo(question), "No tools are offered; I will answer directly.")

    def _text_reply(self, text: str, reasoning: str) -> Reply:
        return Reply(
            content=tuple(split_words(text, self._words_per_chunk)),
            reasoning=tuple(split_words(reasoning, self._words_per_chunk)),
            finish_reason="stop",
        )

    def _search_call(self, request: ChatCompletionRequest, question: str) -> Reply:
        reasoning = f'I should search the knowledge base for "{question}".'
        call = ToolCallReply(
            id=_call_id(request),
            name=SEARCH_TOOL,
            arguments=json.dumps({"query": question}, ensure_ascii=False),
        )
        return Reply(
            reasoning=tuple(split_words(reasoning, self._words_per_chunk)),
            tool_calls=(call,),
            finish_reason="tool_calls",
        )

    def _answer_from_search(self, question: str, tool_output: str) -> Reply:
        hits = parse_search_hits(tool_output)
        return self._text_reply(cited_answer(question, hits), answer_reasoning(hits, question))


class RoundsPolicy:
    """For benchmarks: ``rounds`` rounds of ``parallel`` search calls, then a short answer.

    The round is the number of assistant tool-call messages after the last user message,
    so any number of concurrent conversations can share one server.
    """

    name = "rounds"

    def __init__(
        self,
        rounds: int,
        parallel: int,
        words_per_chunk: int,
        *,
        tool: str = SEARCH_TOOL,
        arguments: dict[str, Any] | None = None,
        answer: str | None = None,
        chunk_delay_ms: int = 0,
    ) -> None:
        self._rounds = rounds
        self._answer = answer
        self._chunk_delay_ms = chunk_delay_ms
        self._parallel = parallel
        self._words_per_chunk = words_per_chunk
        self._tool = tool
        self._arguments = arguments

    def status(self) -> dict[str, Any]:
        return {
            "policy": self.name,
            "rounds": self._rounds,
            "parallel": self._parallel,
            "tool": self._tool,
        }

    def reply(self, request: ChatCompletionRequest, conversation_key: str | None) -> Reply:
        start = last_user_index(request)
        later = request.messages[(start or 0) + 1 :]
        done = sum(1 for m in later if m.role == "assistant" and m.tool_calls)
        if done >= self._rounds:
            text = self._answer or f"Done after {done} tool rounds."
            return Reply(
                content=tuple(split_words(text, self._words_per_chunk)),
                finish_reason="stop",
                faults=Faults(chunk_delay_ms=self._chunk_delay_ms),
            )
        prefix = _call_id(request)
        calls = tuple(
            ToolCallReply(
                id=f"{prefix}_{done}_{i}",
                name=self._tool,
                arguments=json.dumps(
                    self._arguments
                    if self._arguments is not None
                    else {"query": f"round {done} part {i}"}
                ),
            )
            for i in range(self._parallel)
        )
        return Reply(tool_calls=calls, finish_reason="tool_calls")


def _call_id(request: ChatCompletionRequest) -> str:
    """The same conversation always gets the same call ids. Pydantic's own serialiser: the
    benchmarks' zero-latency model shares the engine's CPUs."""
    messages = request.model_dump_json(include={"messages"})
    return "call_demo_" + hashlib.sha256(messages.encode()).hexdigest()[:16]


def _echo(question: str) -> str:
    asked = f'You asked: "{question}". ' if question else ""
    return (
        f"(offline demo answer from the scripted LLM test double) {asked}"
        "No real model is connected, so this only echoes the question."
    )
