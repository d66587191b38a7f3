"""History under a token budget from synthetic sessions (SPEC M-08, M-09, T-20), no database:
the pairing and budget logic is fed rows as the pager yields them, newest first."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from weft_context.summary import summary_text
from weft_context.tokens import TokenEstimator
from weft_memory.history import History, HistoryQuery, _fill
from weft_memory.replay import KB_RESULT_REDACTION, replay_turn, strip_thinking
from weft_storage.memory.models import Message

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _turn(i: int, answer: str = "", completed: bool = True, steps: Any = None) -> list[Message]:
    at = T0 + timedelta(seconds=i)
    common = {"tenant_id": "t", "session_id": "s", "request_id": f"r{i:05d}"}
    return [
        Message(id=f"u{i:05d}", role="user", content=f"question {i}", is_completed=True,
                created_at=at, agent_steps=[], **common),
        Message(id=f"a{i:05d}", role="assistant", content=answer or f"answer {i}",
                is_completed=completed, created_at=at + timedelta(microseconds=1),
                agent_steps=steps or [], **common),
    ]  # fmt: skip


def _session(n_turns: int, **kw: Any) -> list[Message]:
    return [row for i in range(n_turns) for row in _turn(i, **kw)]


async def _newest_first(rows: Iterable[Message]) -> AsyncIterator[Message]:
    for row in sorted(rows, key=lambda r: (r.created_at, r.id), reverse=True):
        yield row


async def _build(rows: list[Message], query: HistoryQuery, summary: str | None = None) -> History:
    history = History(summary=summary)
    await _fill(history, _newest_first(rows), TokenEstimator(), query)
    return history


async def test_budget_keeps_contiguous_recent_turns() -> None:
    # SPEC M-08: contiguous most recent turns within the budget.
    rows = _session(10)
    one_turn = sum(TokenEstimator().message_tokens(m) for m in replay_turn(*rows[-2:]))
    history = await _build(rows, HistoryQuery(token_budget=3 + 3 * one_turn))
    assert [t.request_id for t in history.turns] == ["r00007", "r00008", "r00009"]
    assert history.tokens <= 3 + 3 * one_turn
    assert history.messages[0] == {"role": "user", "content": "question 7"}
    assert history.messages[-1] == {"role": "assistant", "content": "answer 9"}


async def test_stops_at_first_turn_that_does_not_fit() -> None:
    # A big turn in the middle ends the history even though older small turns would fit.
    rows = (
        _session(3) + _turn(3, answer="word " * 5000) + [r for i in range(4, 6) for r in _turn(i)]
    )
    history = await _build(rows, HistoryQuery(token_budget=200))
    assert [t.request_id for t in history.turns] == ["r00004", "r00005"]


async def test_latest_turn_kept_even_alone_over_budget() -> None:
    # SPEC M-08: the latest turn is kept even if alone over budget.
    rows = _session(3) + _turn(3, answer="word " * 5000)
    history = await _build(rows, HistoryQuery(token_budget=50))
    assert [t.request_id for t in history.turns] == ["r00003"]
    assert history.tokens > 50


async def test_only_completed_turns_and_orphans_skipped() -> None:
    # SPEC M-08: pair by request id, completed turns only; an assistant row without its
    # user row (a page cut) is an incomplete turn.
    rows = _turn(0) + _turn(1, completed=False) + _turn(2)
    history = await _build(rows, HistoryQuery(token_budget=10_000))
    assert [t.request_id for t in history.turns] == ["r00000", "r00002"]
    orphan = [r for r in _turn(5) if r.role == "assistant"]
    history = await _build(orphan + _turn(6), HistoryQuery(token_budget=10_000))
    assert [t.request_id for t in history.turns] == ["r00006"]


async def test_max_turns_without_budget() -> None:
    history = await _build(_session(8), HistoryQuery(max_turns=3))
    assert [t.request_id for t in history.turns] == ["r00005", "r00006", "r00007"]


async def test_leading_summary_counts_in_budget() -> None:
    # SPEC M-08: the latest checkpoint becomes a leading summary.
    history = await _build(_session(4), HistoryQuery(token_budget=10_000), summary="S1")
    assert summary_text(history.messages[0]) == "S1"
    assert history.tokens > sum(t.tokens for t in history.turns) + 3


async def test_five_thousand_message_session() -> None:
    # SPEC M-08: a 5000-row session; the whole of it fits a 200k window here.
    rows = _session(2500)
    history = await _build(rows, HistoryQuery(token_budget=200_000))
    assert len(history.turns) == 2500
    assert len(history.messages) == 5000
    assert history.tokens <= 200_000
    small = await _build(rows, HistoryQuery(token_budget=2_000))
    assert 0 < len(small.turns) < 200
    assert small.turns[-1].request_id == "r02499"


def _tool_steps() -> list[dict[str, Any]]:
    kb = json.dumps({"query": "q", "count": 2, "results": [{"id": "c1"}, {"id": "c2"}]})
    return [
        {"round": 0, "thought": "<think>hidden</think>Let me search.", "tool_calls": [
            {"call_id": "k1", "tool_name": "search_knowledge", "arguments": {"query": "q"},
             "success": True, "output": kb},
            {"call_id": "d1", "tool_name": "database_query", "arguments": {"sql": "select 1"},
             "success": True, "output": "1 row"},
        ]},
    ]  # fmt: skip


def test_replay_redacts_kb_unless_retained() -> None:
    # SPEC T-20: KB results redacted; with retain_retrieval_history compacted to one line.
    user, assistant = _turn(0, answer="<think>plan</think>Final [c1]", steps=_tool_steps())
    plain = replay_turn(user, assistant)
    assert [m["role"] for m in plain] == ["user", "assistant", "tool", "tool", "assistant"]
    assert plain[1]["content"] == "Let me search."  # SPEC M-09: thinking removed
    assert plain[2]["content"] == KB_RESULT_REDACTION
    assert plain[3]["content"] == "1 row"
    assert plain[-1]["content"] == "Final [c1]"
    kept = replay_turn(user, assistant, retain_retrieval=True)
    assert kept[2]["content"] == (
        "Knowledge search returned 2 result(s) (details omitted from history)"
    )


def test_strip_thinking_leaves_plain_text() -> None:
    assert strip_thinking("no tags") == "no tags"
    assert strip_thinking("<thinking>a\nb</thinking>\nanswer") == "answer"
