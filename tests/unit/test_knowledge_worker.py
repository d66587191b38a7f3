"""The knowledge worker's model client and settings, without infrastructure (SPEC T-18,
T-10): wiki pages are written through ``weft_llm`` so the LLM metrics count their calls
as they count graph extraction's, and one setting dedicates a worker to some tenants
(the former per-work names still read)."""

from __future__ import annotations

import json

import pytest
from weft_knowledge.settings import KnowledgeSettings
from weft_knowledge.wiki_generation import PROMPT_MARKER, SYSTEM_PROMPT, ChatPageWriter
from weft_llm import MeteredModel, Usage
from weft_testkit.function_model import answer, queued


class RecordingMeter:
    """An ``LLMMeter`` that keeps what it was told."""

    def __init__(self) -> None:
        self.answered_calls: list[tuple[str, Usage | None]] = []
        self.failures: list[tuple[str, str]] = []

    def failed(self, model: str, reason: str) -> None:
        self.failures.append((model, reason))

    def answered(
        self, model: str, seconds: float, first_token_s: float | None, usage: Usage | None
    ) -> None:
        self.answered_calls.append((model, usage))


async def test_wiki_calls_are_metered_like_every_weft_llm_call() -> None:
    pages = json.dumps({"pages": [{"slug": "a", "title": "A", "content": "a"}]})
    model = queued([answer(pages, usage=Usage(prompt_tokens=120, completion_tokens=80))])
    meter = RecordingMeter()
    writer = ChatPageWriter(MeteredModel(model, meter), "wiki-model")

    completion = await writer.complete(SYSTEM_PROMPT, f"{PROMPT_MARKER}: notes\n\ntext")

    assert (completion.text, completion.input_tokens, completion.output_tokens) == (pages, 120, 80)
    assert meter.answered_calls == [("wiki-model", Usage(prompt_tokens=120, completion_tokens=80))]
    (call,) = model.calls
    assert call.request.model == "wiki-model"
    assert [m["role"] for m in call.request.messages] == ["system", "user"]


@pytest.mark.parametrize(
    ("env", "tenants"),
    [
        ({"WEFT_KNOWLEDGE_WORKER_TENANTS": "a, b"}, ("a", "b")),
        ({"WEFT_WIKI_TENANTS": "w"}, ("w",)),
        ({"WEFT_GRAPH_TENANTS": "g"}, ("g",)),
        ({"WEFT_KNOWLEDGE_WORKER_TENANTS": "k", "WEFT_WIKI_TENANTS": "w"}, ("k",)),
        ({}, ()),
    ],
)
def test_one_setting_dedicates_a_worker_to_tenants(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], tenants: tuple[str, ...]
) -> None:
    for name in ("WEFT_KNOWLEDGE_WORKER_TENANTS", "WEFT_WIKI_TENANTS", "WEFT_GRAPH_TENANTS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert KnowledgeSettings().tenants() == tenants
