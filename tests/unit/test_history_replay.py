"""Stored turns replay as OpenAI messages (SPEC M-09) with KB results redacted (T-20)."""

from __future__ import annotations

from datetime import UTC, datetime

from weft_memory.history import KB_RESULT_REDACTION, replay_turn
from weft_storage.memory.models import Message


def _msg(role: str, content: str, steps: list[dict[str, object]] | None = None) -> Message:
    return Message(
        id=role, tenant_id="t", session_id="s", request_id="r", role=role, content=content,
        agent_steps=steps or [], is_completed=True, created_at=datetime.now(UTC),
    )  # fmt: skip


def test_turn_replays_user_tool_round_and_answer() -> None:
    steps = [
        {"round": 0, "thought": "", "tool_calls": [
            {"call_id": "k1", "tool_name": "search_knowledge", "arguments": {"query": "x"},
             "success": True, "output": "secret chunk text"},
            {"call_id": "w1", "tool_name": "thinking", "arguments": {}, "success": False,
             "error": "bad"},
        ]},
        {"round": 1, "thought": "", "tool_calls": []},
    ]  # fmt: skip
    messages = replay_turn(_msg("user", "question"), _msg("assistant", "answer [c1]", steps))
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert messages[1]["tool_calls"][0]["function"]["name"] == "search_knowledge"
    assert messages[2]["content"] == KB_RESULT_REDACTION  # SPEC T-20
    assert messages[3]["content"] == "Error: bad"
    assert messages[-1] == {"role": "assistant", "content": "answer [c1]"}


def test_wiki_reads_are_redacted_and_kept_whole_when_retained() -> None:
    """SPEC T-20 for the wiki: wiki_search and wiki_read_page results become the redaction
    line (the wiki may have changed); a retaining agent (the wiki-fixer) keeps them whole,
    since the slugs it found are what it edits next. Wiki writes are never redacted."""
    page = '{"pages": [{"page": "w1", "slug": "stardust-probe", "content": "comet dust"}]}'
    found = '{"count": 1, "results": [{"slug": "stardust-probe", "page": "w1"}]}'
    steps = [{"round": 0, "thought": "", "tool_calls": [
        {"call_id": "a", "tool_name": "wiki_search", "success": True, "output": found},
        {"call_id": "b", "tool_name": "wiki_read_page", "success": True, "output": page},
        {"call_id": "c", "tool_name": "wiki_rename_page", "success": True,
         "output": '{"slug": "stardust"}'},
    ]}]  # fmt: skip
    user, answer = _msg("user", "q"), _msg("assistant", "a", steps)
    redacted = [m["content"] for m in replay_turn(user, answer) if m["role"] == "tool"]
    assert redacted == [KB_RESULT_REDACTION, KB_RESULT_REDACTION, '{"slug": "stardust"}']
    kept = [m["content"] for m in replay_turn(user, answer, retain_retrieval=True)]
    assert found in kept and page in kept
