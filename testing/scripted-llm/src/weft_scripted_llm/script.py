"""The script file: steps the test double plays back, in order.

A script is either a list of steps (one global queue) or an object
``{"steps": [...], "conversations": {"<key>": [...]}}`` with per-conversation queues.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from weft_scripted_llm.reply import (
    ErrorFault,
    Faults,
    FinishReason,
    Reply,
    ToolCallReply,
    UsageOverride,
)
from weft_scripted_llm.tokens import split_words


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolCallSpec(_Strict):
    """A scripted tool call; a string `arguments` is sent as is (it may be broken JSON)."""

    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    id: str | None = None

    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)


class ScriptStep(_Strict):
    """One scripted answer with its faults. Text given as a list is streamed piece by piece."""

    match: str | None = None
    content: str | list[str] | None = None
    reasoning: str | list[str] | None = None
    tool_calls: list[ToolCallSpec] = Field(default_factory=list)
    finish_reason: FinishReason | None = None
    usage: UsageOverride | None = None
    delay_ms: int = Field(default=0, ge=0)
    chunk_delay_ms: int = Field(default=0, ge=0)
    error: ErrorFault | None = None
    stall_after_chunks: int | None = Field(default=None, ge=0)
    context_overflow: bool = False

    def matches(self, user_text: str) -> bool:
        """Whether `match` occurs in `user_text` (case-insensitive); False without `match`."""
        return self.match is not None and self.match.lower() in user_text.lower()

    def to_reply(self, *, call_id_prefix: str, words_per_chunk: int) -> Reply:
        calls = tuple(
            ToolCallReply(
                id=spec.id or f"{call_id_prefix}_{i}",
                name=spec.name,
                arguments=spec.arguments_text(),
            )
            for i, spec in enumerate(self.tool_calls)
        )
        return Reply(
            content=_pieces(self.content, words_per_chunk),
            reasoning=_pieces(self.reasoning, words_per_chunk),
            tool_calls=calls,
            finish_reason=self.finish_reason,
            usage=self.usage,
            faults=self.faults(),
        )

    def faults(self) -> Faults:
        return Faults(
            delay_ms=self.delay_ms,
            chunk_delay_ms=self.chunk_delay_ms,
            error=self.error,
            stall_after_chunks=self.stall_after_chunks,
            context_overflow=self.context_overflow,
        )


class Script(_Strict):
    """The global queue `steps` and optional per-conversation queues."""

    steps: list[ScriptStep] = Field(default_factory=list)
    conversations: dict[str, list[ScriptStep]] = Field(default_factory=dict)
    fallback: Literal["error", "demo", "rounds"] = "error"
    """What answers a request no step matches: the exhausted error, the demo policy (lets a
    test script faults for a few sessions while others get ordinary answers), or the
    rounds policy (``rounds`` tool rounds of ``parallel`` search calls, then an answer;
    for benchmarks)."""
    rounds: int = Field(default=3, ge=0, le=50)
    parallel: int = Field(default=2, ge=1, le=16)
    rounds_tool: str = "search_knowledge"
    """The tool the rounds policy calls (a trivial one keeps the tool worker out of a
    benchmark of the engine)."""
    rounds_arguments: dict[str, Any] | None = None
    """Arguments of every rounds call; default ``{"query": "round R part I"}``."""
    rounds_answer: str | None = None
    """The rounds policy's final answer; default ``"Done after R tool rounds."``."""
    rounds_chunk_delay_ms: int = Field(default=0, ge=0)
    """Pause between the final answer's chunks (a slowly streamed answer, for fault tests
    that must catch a turn mid-answer)."""


def _pieces(text: str | list[str] | None, words_per_chunk: int) -> tuple[str, ...]:
    if text is None:
        return ()
    if isinstance(text, list):
        return tuple(text)
    return tuple(split_words(text, words_per_chunk))


def parse_script(data: Any) -> Script:
    """A script from decoded JSON/YAML: a list of steps or a `Script` object."""
    if isinstance(data, list):
        return Script(steps=[ScriptStep.model_validate(s) for s in data])
    return Script.model_validate(data)


def load_script(path: Path) -> Script:
    """Read a script file; `.json` is JSON, anything else YAML (a superset of JSON)."""
    text = path.read_text(encoding="utf-8")
    data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    return parse_script(data if data is not None else [])
