"""Stream plumbing: <think> routing (E-08), delta coalescing, message sanitising (E-05)."""

from __future__ import annotations

import time
from typing import Any, cast

from weft_contracts import AgentConfig
from weft_engine.emitter import EventEmitter
from weft_engine.state import TurnState
from weft_engine.think import ThinkSettings, think
from weft_engine.think.coalesce import DeltaCoalescer
from weft_engine.think.sanitize import sanitize_messages
from weft_engine.think.split import ThinkSplitter, ThoughtJoiner
from weft_llm import ChatMessage
from weft_testkit.function_model import answer, replies


def test_think_blocks_split_across_chunks_go_to_thoughts() -> None:  # SPEC E-08
    splitter = ThinkSplitter()
    parts = [splitter.feed(c) for c in ["Hi <th", "ink>pon", "dering</thi", "nk> there", "<"]]
    parts.append(splitter.flush())
    assert "".join(p.thought for p in parts) == "pondering"
    assert "".join(p.content for p in parts) == "Hi  there<"


async def test_first_delta_goes_at_once_then_deltas_are_merged() -> None:
    sent: list[tuple[str, str]] = []
    now = [0.0]

    async def emit(kind: str, text: str) -> None:
        sent.append((kind, text))

    coalescer = DeltaCoalescer(emit, window_s=0.05, clock=lambda: now[0])
    await coalescer.add("answer", "A")
    assert sent == [("answer", "A")]
    for piece in ("b", "c", "d"):
        now[0] += 0.01
        await coalescer.add("answer", piece)
    assert sent == [("answer", "A")]  # still inside the window
    now[0] += 0.05
    await coalescer.add("answer", "e")
    await coalescer.add("thought", "t")  # a kind change flushes at once
    await coalescer.flush()
    assert sent == [("answer", "A"), ("answer", "bcde"), ("thought", "t")]


def test_sanitize_merges_same_role_and_drops_orphan_tool_results() -> None:  # SPEC E-05
    messages: list[ChatMessage] = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "a"},
        {"role": "user", "content": "b"},
        {"role": "tool", "tool_call_id": "ghost", "content": "orphan"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "k", "type": "function",
         "function": {"name": "x", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "k", "content": "kept"},
    ]  # fmt: skip
    cleaned = sanitize_messages(messages)
    assert [m["role"] for m in cleaned] == ["system", "user", "assistant", "tool"]
    assert cleaned[1]["content"] == "a\n\nb"
    assert cleaned[3]["content"] == "kept"


class _RecordingEmitter:
    """The two emitter methods ``think`` uses, recording the events' data."""

    def __init__(self) -> None:
        self.data: list[Any] = []

    async def emit(self, event_type: Any, ids: dict[str, Any], data: Any, **_: Any) -> None:
        self.data.append(data)

    async def started_streaming(self, request_id: str, round_: int) -> None:
        return None


async def test_reasoning_and_think_blocks_are_separated_alike_in_events_and_step() -> None:
    """SPEC E-08: reasoning_content and a <think> block are two thoughts; a blank line
    separates them in the streamed thought events and in the stored reasoning alike."""
    state = TurnState(
        tenant_id="t", session_id="s", request_id="r", user_id="u",
        agent=AgentConfig(agent_id="a", model="m"), messages=[{"role": "user", "content": "q"}],
        started_at=time.time(),
    )  # fmt: skip
    emitter = _RecordingEmitter()
    # reasoning_content, then content holding a <think> block that the chunks cut apart
    model = replies(
        answer(
            "<think>Refunds are in section 4.</think>Within 30 days.",
            reasoning="I should check the policy.",
        ),
        chunk_chars=5,
    )
    response = await think(
        state, model, cast(EventEmitter, emitter), [],
        ThinkSettings(coalesce_window_s=0.0), reasoning_effort=None,
    )  # fmt: skip
    joined = "I should check the policy.\n\nRefunds are in section 4."
    assert response.reasoning == joined
    assert response.content == "Within 30 days."
    streamed = [d for d in emitter.data if type(d).__name__ == "ThoughtData"]
    assert "".join(d.delta for d in streamed) == joined


def test_thought_joiner_separates_only_where_the_origin_changes() -> None:  # SPEC E-08
    joiner = ThoughtJoiner()
    parts = [joiner.add("think", "a"), joiner.add("think", "b"), joiner.add("reasoning", "")]
    parts += [joiner.add("reasoning", "c"), joiner.add("think", "d")]
    assert parts == ["a", "b", "", "\n\nc", "\n\nd"]
    assert joiner.text == "ab\n\nc\n\nd"
    assert ThoughtJoiner().add("reasoning", "first") == "first"  # nothing before: no gap
