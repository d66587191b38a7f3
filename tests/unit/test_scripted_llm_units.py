"""Pure parts of the scripted LLM test double: script, policies, citations, embeddings, CLI."""

from __future__ import annotations

import asyncio
import base64
import json
import struct
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI
from pydantic import ValidationError
from typer.testing import CliRunner
from weft_scripted_llm import __main__ as cli_module
from weft_scripted_llm.citations import best_hits, cited_answer, parse_search_hits
from weft_scripted_llm.embeddings import embeddings_body
from weft_scripted_llm.faults import paced_events, unpaced
from weft_scripted_llm.openai_schema import ChatCompletionRequest, EmbeddingRequest
from weft_scripted_llm.policy import DemoPolicy, ScriptExhaustedError, ScriptPolicy, take_step
from weft_scripted_llm.reply import Faults
from weft_scripted_llm.script import ScriptStep, load_script, parse_script
from weft_scripted_llm.tokens import split_words


def chat(*messages: dict[str, Any], tools: tuple[str, ...] = ()) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {
            "model": "m",
            "messages": list(messages),
            "tools": [{"type": "function", "function": {"name": n}} for n in tools] or None,
        }
    )


@pytest.mark.parametrize("text", ["", "one", "  leading and trailing  ", "a b\nc\td e f g"])
def test_split_words_pieces_join_back(text: str) -> None:
    assert "".join(split_words(text, 3)) == text


def test_split_words_groups_a_few_words() -> None:
    assert split_words("one two three four five", 2) == ["one two ", "three four ", "five"]


def test_search_hits_from_json_results() -> None:
    output = json.dumps(
        {"results": [{"id": "c1", "document_title": "Guide", "content": "Alpha."}, {"text": "B"}]}
    )
    hits = parse_search_hits(output)
    assert [(h.id, h.title, h.content) for h in hits] == [
        ("c1", "Guide", "Alpha."),
        ("r2", "", "B"),
    ]


def test_search_hits_from_json_inside_text_and_double_encoded() -> None:
    embedded = 'Search done.\n{"results": [{"id": "c9", "content": "x"}]}\nEnd.'
    assert [h.id for h in parse_search_hits(embedded)] == ["c9"]
    double = json.dumps(json.dumps([{"id": "c2", "content": "y"}]))
    assert [h.id for h in parse_search_hits(double)] == ["c2"]


def test_search_hits_from_plain_lines() -> None:
    hits = parse_search_hits("[c4] Refunds take 30 days.\n\nSomething else")
    assert [(h.id, h.content) for h in hits] == [
        ("c4", "Refunds take 30 days."),
        ("r2", "Something else"),
    ]


def test_best_hits_by_overlap_else_the_first() -> None:
    hits = parse_search_hits(
        json.dumps(
            {
                "results": [
                    {"id": "a", "content": "Cats sleep a lot."},
                    {"id": "b", "content": "Refund requests for annual plans."},
                    {"id": "c", "content": "Annual refund policy explained for plans."},
                ]
            }
        )
    )
    assert [h.id for h in best_hits("annual plan refund policy", hits)] == ["c", "b"]
    assert [h.id for h in best_hits("zebra", hits)] == ["a"]


def test_cited_answer_without_titles() -> None:
    hits = parse_search_hits('[{"id": "c1", "content": "Water boils at 100 degrees!"}]')
    assert cited_answer("when does water boil", hits) == (
        "From the knowledge base: Water boils at 100 degrees [c1]!\n\nSources: [c1]"
    )


def test_take_step_prefers_match_then_first_unmatched() -> None:
    queue = [
        ScriptStep(match="refund", content="r"),
        ScriptStep(content="plain 1"),
        ScriptStep(content="plain 2"),
    ]
    assert take_step(queue, "hello") is not None
    assert [s.content for s in queue] == ["r", "plain 2"]
    step = take_step(queue, "A REFUND please")
    assert step is not None and step.content == "r"
    assert take_step(queue, "refund") is not None
    assert take_step(queue, "anything") is None


def test_script_policy_raises_when_exhausted() -> None:
    policy = ScriptPolicy(parse_script([{"content": "only"}]), words_per_chunk=3)
    request = chat({"role": "user", "content": "hi"})
    assert policy.reply(request, None).content_text == "only"
    with pytest.raises(ScriptExhaustedError, match="scripted LLM: script exhausted"):
        policy.reply(request, None)


def test_rounds_policy_answers_with_the_scripted_text_and_pace_after_its_rounds() -> None:
    script = {
        "fallback": "rounds", "rounds": 1, "parallel": 2, "rounds_tool": "thinking",
        "rounds_answer": "a slow answer in pieces", "rounds_chunk_delay_ms": 40,
    }  # fmt: skip
    policy = ScriptPolicy(parse_script(script), words_per_chunk=2)
    first = policy.reply(chat({"role": "user", "content": "go"}), None)
    assert [c.name for c in first.tool_calls] == ["thinking", "thinking"]
    assert first.faults.chunk_delay_ms == 0  # only the answer is paced
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": "{}"}}
        for c in first.tool_calls
    ]
    answered = chat(
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *({"role": "tool", "tool_call_id": c.id, "content": "ok"} for c in first.tool_calls),
    )
    last = policy.reply(answered, None)
    assert last.content_text == "a slow answer in pieces" and len(last.content) > 1
    assert last.faults.chunk_delay_ms == 40 and not last.tool_calls


def test_load_script_yaml_and_json(tmp_path: Path) -> None:
    yaml_file = tmp_path / "s.yaml"
    yaml_file.write_text(
        "steps:\n  - content: hi\n    tool_calls:\n      - name: t\n        arguments: '{bad'\n",
        encoding="utf-8",
    )
    json_file = tmp_path / "s.json"
    json_file.write_text(json.dumps([{"error": {"status": 503}}]), encoding="utf-8")
    assert load_script(yaml_file).steps[0].tool_calls[0].arguments_text() == "{bad"
    error = load_script(json_file).steps[0].error
    assert error is not None and error.status == 503


def test_script_rejects_unknown_fields_and_finish_reasons() -> None:
    with pytest.raises(ValidationError):
        parse_script([{"content": "x", "finish_reason": "done"}])
    with pytest.raises(ValidationError):
        parse_script([{"contnet": "typo"}])


def test_demo_policy_rule_order() -> None:
    policy = DemoPolicy(words_per_chunk=3)
    ask = {"role": "user", "content": "Summarize the refund policy"}
    searched = chat(ask, tools=("search_knowledge",))
    assert policy.reply(searched, None).tool_calls[0].name == "search_knowledge"
    answered = chat(
        ask,
        {"role": "tool", "tool_call_id": "c", "content": '{"results": []}'},
        tools=("search_knowledge",),
    )
    assert "nothing" in (policy.reply(answered, None).content_text or "")
    summary = policy.reply(chat(ask), None).content_text or ""
    assert summary.startswith("Summary:")


def test_demo_tool_call_ids_are_deterministic() -> None:
    policy = DemoPolicy(words_per_chunk=3)
    request = chat({"role": "user", "content": "q"}, tools=("search_knowledge",))
    assert policy.reply(request, None).tool_calls == policy.reply(request, None).tool_calls


def test_embeddings_base64_matches_float_and_token_ids() -> None:
    def body(**fields: Any) -> dict[str, Any]:
        request = EmbeddingRequest.model_validate({"model": "e", **fields})
        return embeddings_body(request, 32, "e")

    floats = body(input="same words", encoding_format="float")["data"][0]["embedding"]
    encoded = body(input="same words", encoding_format="base64")["data"][0]["embedding"]
    decoded = struct.unpack("<32f", base64.b64decode(encoded))
    assert decoded == pytest.approx(floats, rel=1e-6)
    tokens = body(input=[[1, 2, 3], [1, 2, 3]])["data"]
    assert tokens[0]["embedding"] == tokens[1]["embedding"]
    assert len(body(input=[5, 6])["data"]) == 1


def test_cli_serve_builds_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    served: dict[str, Any] = {}

    def fake_run(app: FastAPI, host: str, port: int, log_level: str) -> None:
        served.update(app=app, host=host, port=port)

    monkeypatch.setattr(uvicorn, "run", fake_run)  # the module the CLI serves with
    script = tmp_path / "s.yaml"
    script.write_text("- content: hi\n", encoding="utf-8")
    result = CliRunner().invoke(
        cli_module.cli, ["serve", "--port", "9999", "--script", str(script)]
    )
    assert result.exit_code == 0, result.output
    state = served["app"].state.scripted_llm
    assert (served["port"], state.settings.policy, state.policy.name) == (9999, "script", "script")


def test_cli_default_policy_is_demo() -> None:
    assert cli_module.resolve_policy(None, None) == "demo"
    assert cli_module.resolve_policy(None, Path("s.yaml")) == "script"
    assert cli_module.resolve_policy("demo", Path("s.yaml")) == "demo"


async def test_a_paced_stream_is_an_event_per_write() -> None:
    """With `chunk_delay_ms` each event is its own write (an unpaced stream is one body,
    tests/unit/test_scripted_llm.py)."""
    events = [b"data: 1\n\n", b"data: 2\n\n", b"data: [DONE]\n\n"]
    faults = Faults(chunk_delay_ms=1)
    assert not unpaced(faults) and unpaced(Faults())
    writes = [w async for w in paced_events(events, faults, None, asyncio.Event())]  # type: ignore[arg-type]
    assert writes == events
