"""Stream plumbing: <think> routing (E-08), delta coalescing, message sanitising (E-05)."""

from __future__ import annotations

from weft_engine.coalesce import DeltaCoalescer
from weft_engine.sanitize import sanitize_messages
from weft_engine.thinksplit import ThinkSplitter


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
    messages = [
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
