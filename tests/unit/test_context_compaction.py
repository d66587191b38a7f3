"""Compactor with the test kit's in-process FunctionModel (SPEC M-03 .. M-07)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from weft_context.images import content_text
from weft_context.summary import summary_message, summary_text
from weft_context.tokens import TokenEstimator
from weft_engine.compaction import CompactionSettings, Compactor
from weft_engine.compaction.compactor import _safe_cut
from weft_engine.compaction.fileops import parse_file_ops
from weft_engine.compaction.summarizer import SPLIT_TURN_PROMPT
from weft_llm import (
    AssistantMessage,
    ChatMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    TransientLLMError,
    UserMessage,
)
from weft_testkit.function_model import FunctionModel, ModelCall, Reply, answer

from tests.unit.turn_states import text


def _summarizer(script: Callable[[int], str | BaseException] | None = None) -> FunctionModel:
    """Answers the n-th summary request (n from 1) with ``script(n)``, a text or an exception
    to raise, by default ``SUMMARY-n``; the reasoning it streams is progress, never part of
    the summary."""

    def reply(call: ModelCall) -> Reply:
        n = call.index + 1
        chosen = script(n) if script else f"SUMMARY-{n}"
        if isinstance(chosen, BaseException):
            return chosen
        return answer(chosen, reasoning="thinking about it")

    return FunctionModel(reply=reply)


SYSTEM: SystemMessage = {"role": "system", "content": "You are helpful."}
EST = TokenEstimator()


def _settings(**kw: Any) -> CompactionSettings:
    # A small window so synthetic histories cross the threshold quickly.
    base: dict[str, Any] = {"model": "m", "context_window": 40_000, "completion_budget": 1000}
    return CompactionSettings(**{**base, **kw})


def _turn(tag: str, rounds: int = 0, words: int = 300) -> list[ChatMessage]:
    messages: list[ChatMessage] = [{"role": "user", "content": f"question {tag}"}]
    for r in range(rounds):
        call_id = f"{tag}-c{r}"
        args = json.dumps({"path": f"/workspace/{tag}/file{r}.txt"})
        name = "read_file" if r % 2 == 0 else "write_file"
        messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
        ]})  # fmt: skip
        messages.append(
            {"role": "tool", "tool_call_id": call_id, "content": f"result {r} " + "data " * words}
        )
    messages.append({"role": "assistant", "content": f"answer {tag} " + "word " * words})
    return messages


def _conversation(
    stored: list[list[ChatMessage]], current: list[ChatMessage], summary: str | None = None
) -> tuple[list[ChatMessage], list[str | None]]:
    messages: list[ChatMessage] = [SYSTEM]
    ids: list[str | None] = [None]
    if summary is not None:
        messages.append(summary_message(summary))
        ids.append(None)
    for i, turn in enumerate(stored):
        messages.extend(turn)
        ids.extend([f"turn-{i}"] * len(turn))
    messages.extend(current)
    ids.extend([None] * len(current))
    return messages, ids


def _assert_pairs_intact(messages: list[ChatMessage]) -> None:
    """Every tool result follows the assistant message that called it."""
    open_calls: set[str] = set()
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            open_calls = {c["id"] for c in m.get("tool_calls", [])}
        elif m["role"] == "tool":
            assert m["tool_call_id"] in open_calls, "tool result separated from its call"


def test_settings_follow_the_reference() -> None:
    # SPEC M-03: reserve = max(completion + 4096, 16384), threshold = window - reserve.
    default = CompactionSettings(model="m")
    assert default.reserve == 16_384 and default.threshold == 200_000 - 16_384
    assert default.keep_recent == 20_000
    big = CompactionSettings(model="m", completion_budget=32_000)
    assert big.reserve == 36_096
    assert _settings().keep_recent < 20_000  # smaller on small windows
    # SPEC M-06: tool results truncated to 20 % of the window within 8192-32768.
    assert default.tool_result_cap == 32_768 and _settings().tool_result_cap == 8_192


async def test_under_threshold_nothing_happens() -> None:
    model = _summarizer()
    messages, ids = _conversation([_turn("a")], [{"role": "user", "content": "hi"}])
    result = await Compactor(model, _settings(), EST).compact(messages, ids)
    assert not result.compacted and result.messages == messages and model.requests == []


async def test_older_turns_summarised_and_checkpoint_on_last_covered_turn() -> None:
    # SPEC M-03/M-04/M-07: summary between system and the kept tail; checkpoint on the
    # assistant message of the last stored turn it covers.
    model = _summarizer()
    stored = [_turn(str(i), rounds=2, words=600) for i in range(16)]
    current: list[ChatMessage] = [{"role": "user", "content": "new question"}]
    messages, ids = _conversation(stored, current)
    result = await Compactor(model, _settings(), EST).compact(messages, ids)
    assert result.compacted and not result.split_turn and not result.degraded
    assert result.messages[0] == SYSTEM
    assert summary_text(result.messages[1]) is not None
    assert result.messages[-1] == current[0]
    assert result.tokens_after < result.tokens_before
    assert result.tokens_after <= _settings().threshold
    assert result.checkpoint is not None and not result.checkpoint.degraded
    first_kept = result.turn_ids[2]
    assert result.checkpoint.turn_id == f"turn-{int(str(first_kept).split('-')[1]) - 1}"
    _assert_pairs_intact(result.messages)
    assert len(model.requests) == 1
    assert model.requests[0].stall_timeout_s == 120.0
    data = result.event_data(3)
    assert data.tokens_before == result.tokens_before and data.reason == "threshold"


async def test_sixty_tool_rounds_turn_is_split_without_separating_calls() -> None:
    # SPEC M-03: a turn of 60 tool rounds split inside; its first half summarised apart.
    model = _summarizer()
    current = _turn("big", rounds=60, words=450)[:-1]  # the current turn, still running
    messages, ids = _conversation([_turn("old", rounds=1)], current)
    result = await Compactor(model, _settings(), EST).compact(messages, ids)
    assert result.compacted and result.split_turn
    _assert_pairs_intact(result.messages)
    kept = result.messages[3:]
    assert kept[0]["role"] == "assistant" and kept[0].get("tool_calls")
    assert kept[-1] == current[-1]
    prompts = [content_text(r.messages[1]["content"]) for r in model.requests]
    assert len(prompts) == 2 and SPLIT_TURN_PROMPT in prompts[1]
    assert "question big" in prompts[1]  # the split turn's first half has its question
    assert "<current_turn_summary>" in text(result.messages[2])
    # The old stored turn ends exactly before the split turn: checkpoint on it.
    assert result.checkpoint is not None and result.checkpoint.turn_id == "turn-0"
    assert "SUMMARY-2" not in result.checkpoint.summary  # split half never persisted


async def test_summary_of_current_turn_only_has_no_checkpoint() -> None:
    # SPEC M-07: no checkpoint when the summary covers only the current turn.
    model = _summarizer()
    current = _turn("big", rounds=60, words=450)[:-1]
    messages, ids = _conversation([], current)
    result = await Compactor(model, _settings(), EST).compact(messages, ids)
    assert result.compacted and result.split_turn and result.checkpoint is None


async def test_previous_summary_merged_and_file_paths_carried() -> None:
    # SPEC M-04/M-05: merge the previous summary; read/written paths carried forward.
    model = _summarizer()
    previous = "EARLIER\n\n<read-files>\n/workspace/early.txt\n</read-files>"
    stored = [_turn(str(i), rounds=2, words=600) for i in range(16)]
    messages, ids = _conversation(stored, [{"role": "user", "content": "q"}], summary=previous)
    result = await Compactor(model, _settings(), EST).compact(messages, ids)
    prompt = content_text(model.requests[0].messages[1]["content"])
    assert "<previous_summary>\nEARLIER\n</previous_summary>" in prompt
    summary = summary_text(result.messages[1]) or ""
    files = parse_file_ops(summary)
    assert files.read[0] == "/workspace/early.txt"
    assert "/workspace/0/file0.txt" in files.read
    assert "/workspace/0/file1.txt" in files.modified
    assert result.checkpoint is not None and result.checkpoint.summary == summary


async def test_two_failed_attempts_give_a_degraded_archive_with_checkpoint() -> None:
    # SPEC M-04: 2 attempts; failure -> degraded archive, checkpoint still written (M-07).
    model = _summarizer(lambda n: TransientLLMError("stalled"))
    stored = [_turn(str(i), rounds=2, words=600) for i in range(16)]
    messages, ids = _conversation(stored, [{"role": "user", "content": "q"}])
    result = await Compactor(model, _settings(), EST).compact(messages, ids)
    assert len(model.requests) == 2
    assert result.compacted and result.degraded
    summary = summary_text(result.messages[1]) or ""
    assert summary.startswith("[Summary unavailable") and "omitted" in summary
    assert result.checkpoint is not None and result.checkpoint.degraded


async def test_second_attempt_can_succeed() -> None:
    model = _summarizer(lambda n: TransientLLMError("x") if n == 1 else "OK")
    stored = [_turn(str(i), rounds=2, words=600) for i in range(16)]
    messages, ids = _conversation(stored, [{"role": "user", "content": "q"}])
    result = await Compactor(model, _settings(), EST).compact(messages, ids)
    assert not result.degraded and (summary_text(result.messages[1]) or "").startswith("OK")


async def test_summary_input_cap_omits_oldest() -> None:
    # SPEC M-05: the summarised part is capped to one request with 10 % margin.
    model = _summarizer()
    settings = _settings(context_window=30_000, keep_recent_tokens=2_000)
    stored = [_turn(str(i), words=1500) for i in range(30)]
    messages, ids = _conversation(stored, [{"role": "user", "content": "q"}])
    result = await Compactor(model, settings, EST).compact(messages, ids, force_reason="overflow")
    assert result.omitted > 0 and result.reason == "overflow"
    sent = EST.messages_tokens([dict(m) for m in model.requests[0].messages])
    assert sent <= settings.context_window - settings.summary_budget
    summarised = content_text(model.requests[0].messages[1]["content"])
    assert f"({result.omitted} older message(s) omitted" in summarised


async def test_huge_tool_results_truncated_when_still_over_budget() -> None:
    # SPEC M-06: still over budget after summarising -> tool results truncated.
    model = _summarizer()
    settings = _settings(context_window=40_000, keep_recent_tokens=60_000)
    current = _turn("t", rounds=1, words=30_000)[:-1]
    messages, ids = _conversation([_turn("old", words=2000)], current)
    result = await Compactor(model, settings, EST).compact(messages, ids)
    assert result.compacted and result.tools_truncated == 1
    assert "characters truncated" in text(result.messages[-1])
    assert EST.text_tokens(text(result.messages[-1])) <= settings.tool_result_cap + 50


async def test_gain_below_five_percent_gives_up_but_keeps_checkpoint() -> None:
    # SPEC M-06/M-07: < 5 % gained -> request unchanged, checkpoint still reported.
    model = _summarizer(lambda n: "S " * 3000)
    settings = _settings(context_window=40_000, keep_recent_tokens=60_000)
    current: list[ChatMessage] = [{"role": "user", "content": "word " * 30_000}]
    messages, ids = _conversation([_turn("old", words=100)], current)
    result = await Compactor(model, settings, EST).compact(messages, ids)
    assert not result.compacted and result.gave_up
    assert result.messages == messages
    assert result.checkpoint is not None and result.checkpoint.turn_id == "turn-0"


async def test_cancellation_is_not_retried() -> None:
    import asyncio

    model = _summarizer(lambda n: asyncio.CancelledError())
    stored = [_turn(str(i), rounds=2, words=600) for i in range(16)]
    messages, ids = _conversation(stored, [{"role": "user", "content": "q"}])
    with pytest.raises(asyncio.CancelledError):
        await Compactor(model, _settings(), EST).compact(messages, ids)
    assert len(model.requests) == 1


def _calls(n: int) -> AssistantMessage:
    calls: list[ToolCall] = [
        {"id": f"k{i}", "type": "function", "function": {"name": "x", "arguments": "{}"}}
        for i in range(n)
    ]
    return {"role": "assistant", "content": "", "tool_calls": calls}


def _result(i: int) -> ToolMessage:
    return {"role": "tool", "tool_call_id": f"k{i}", "content": "r"}


def test_the_cut_never_separates_tool_results_from_their_call() -> None:
    """SPEC M-03: the kept tail never starts on a tool result (it moves forward past the
    results of the call before it), and is never empty (when nothing is left, it moves
    back to the call whose results end the turn, so the pair stays whole)."""
    user: UserMessage = {"role": "user", "content": "q"}
    answer: AssistantMessage = {"role": "assistant", "content": "a"}
    body: list[ChatMessage] = [user, _calls(2), _result(0), _result(1), answer]
    assert _safe_cut(body, 2) == 4 and _safe_cut(body, 3) == 4  # forward past the results
    assert _safe_cut(body, 1) == 1 and _safe_cut(body, 0) == 0  # a call or user: kept as is
    open_turn: list[ChatMessage] = [user, _calls(2), _result(0), _result(1)]
    assert _safe_cut(open_turn, 2) == 1  # forward hits the end: back to the call
    assert _safe_cut(open_turn, 4) == 1  # nothing fitted: the call and its results stay
    assert _safe_cut([user, answer], 2) == 1  # never an empty tail
    assert _safe_cut([], 0) == 0
    assert _safe_cut([_result(0), _result(1)], 1) == 0  # orphans: everything kept
