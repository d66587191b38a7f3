"""Text that cannot be stored: refused at the edge, cleaned when relayed (API 422 rule).

The request guard runs here on a bare FastAPI app with the one app-level dependency every
service gets from ``create_service_app``; tests/security/test_input_hygiene.py runs it on
the real stack.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import Depends, FastAPI, Form
from pydantic import BaseModel
from weft_contracts import (
    CompleteData,
    FinalAnswerData,
    StepToolCall,
    ToolCallCompleted,
    ToolCallRequested,
    ToolCallRequestedData,
    ToolContext,
    TurnStatus,
)
from weft_contracts.text import clean_json, clean_text, find_unstorable
from weft_contracts.tools import ToolCallCompletedData
from weft_llm.openai_model import _absorb, _Accumulator
from weft_platform.request_text import refuse_unstorable_text
from weft_tool_catalog import ToolInvocation, ToolOutcome, ToolRegistry, ToolSpec
from weft_tool_exec.worker import ToolWorker

NUL_JSON = '"a\\u0000b"'
SURROGATE_JSON = '"a\\ud800b"'


class _Doc(BaseModel):
    title: str
    tags: list[str] = []


def _app() -> FastAPI:
    app = FastAPI(dependencies=[Depends(refuse_unstorable_text)])

    @app.post("/docs/{doc_id}")
    async def create(doc_id: str, body: _Doc) -> dict[str, str]:
        return {"title": body.title}

    @app.post("/free")
    async def free(body: dict[str, Any]) -> dict[str, int]:
        return {"keys": len(body)}

    @app.post("/form")
    async def form(title: str = Form()) -> dict[str, str]:
        return {"title": title}

    @app.get("/search")
    async def search(q: str = "") -> dict[str, str]:
        return {"q": q}

    return app


async def _post(path: str, raw_json: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        headers = {"content-type": "application/json"}
        return await client.post(path, content=raw_json.encode(), headers=headers)


@pytest.mark.parametrize("escape", [NUL_JSON, SURROGATE_JSON, '"\\udfff"'])
async def test_a_model_field_with_nul_or_a_lone_surrogate_is_a_422_naming_it(escape: str) -> None:
    answer = await _post("/docs/d1", f'{{"title": "ok", "tags": ["x", {escape}]}}')
    assert answer.status_code == 422
    [error] = answer.json()["detail"]
    assert error["loc"] == ["body", "tags", 1] and error["type"] == "unstorable_text"
    assert "NUL" in error["msg"] or "surrogate" in error["msg"]


async def test_a_free_form_body_is_checked_at_any_depth_keys_included() -> None:
    answer = await _post("/free", f'{{"a": {{"b": [{{"c": {NUL_JSON}}}]}}}}')
    assert answer.json()["detail"][0]["loc"] == ["body", "a", "b", 0, "c"]
    answer = await _post("/free", '{"ok": 1, "k\\u0000": 2}')
    assert answer.status_code == 422 and answer.json()["detail"][0]["loc"] == ["body", "k\x00"]


async def test_valid_text_passes_untouched() -> None:
    # An escaped backslash then "u0000" is six ordinary characters; a surrogate pair is
    # one valid code point.
    answer = await _post("/docs/d1", '{"title": "a\\\\u0000 \\ud83d\\ude00 caf\\u00e9"}')
    assert answer.status_code == 200 and answer.json() == {"title": "a\\u0000 \U0001f600 café"}


async def test_path_query_and_form_fields_are_checked() -> None:
    transport = httpx.ASGITransport(app=_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        by_path = await client.post("/docs/d%001", json={"title": "ok"})
        by_query = await client.get("/search", params={"q": "a\x00"})
        by_form = await client.post("/form", data={"title": "a\x00b"})
        fine = await client.get("/search", params={"q": "fine"})
    assert by_path.status_code == 422 and by_path.json()["detail"][0]["loc"] == ["path", "doc_id"]
    assert by_query.status_code == 422 and by_query.json()["detail"][0]["loc"] == ["query", "q"]
    assert by_form.status_code == 422 and by_form.json()["detail"][0]["loc"] == ["body", "title"]
    assert fine.status_code == 200


def test_find_unstorable_names_the_first_bad_string() -> None:
    assert find_unstorable({"a": ["ok", {"b": "x\ud800"}]}) == (
        ("a", 1, "b"),
        "contains a lone UTF-16 surrogate (\\ud800) that is not valid Unicode text",
    )
    assert find_unstorable({"a": ["ok", 1, None, True]}) is None


def test_clean_text_drops_nul_and_replaces_lone_surrogates() -> None:
    assert clean_text("a\x00b\ud800c\udfffd") == "ab\ufffdc\ufffdd"
    text = "plain \U0001f600 text"
    assert clean_text(text) is text
    assert clean_json({"k\x00": ["v\ud800", 1]}) == {"k": ["v\ufffd", 1]}


def test_relayed_text_in_contracts_is_cleaned_so_it_can_be_published() -> None:
    # A tool's output or a model's answer with NUL / a lone surrogate must not make
    # model_dump_json (the Kafka publish) or the PostgreSQL write fail.
    result = ToolCallCompletedData(
        call_id="c", tool_name="t", success=True, output="page\x00\ud800", data={"x": "\x00"}
    )
    assert result.output == "page\ufffd" and result.data == {"x": ""}
    step = StepToolCall(call_id="c", tool_name="t", arguments={"q": "a\x00"}, output="\x00")
    done = CompleteData(status=TurnStatus.COMPLETED, final_answer="fin\x00al\ud800")
    assert step.arguments == {"q": "a"} and done.final_answer == "final\ufffd"
    assert "\\u0000" not in FinalAnswerData(round=0, delta="x\x00").model_dump_json()


class _Sink:
    def __init__(self) -> None:
        self.content: list[str] = []

    async def on_content(self, text: str) -> None:
        self.content.append(text)

    async def on_reasoning(self, text: str) -> None:
        pass


async def test_the_model_stream_is_cleaned_as_it_arrives() -> None:
    acc, sink = _Accumulator(), _Sink()
    chunk = {"choices": [{"delta": {"content": "an\x00swer\ud800"}}]}
    await _absorb(chunk, acc, sink)
    assert sink.content == ["answer\ufffd"] and acc.content == ["answer\ufffd"]


class _PageWithNul:
    spec = ToolSpec(name="page", description="d", parameters={"type": "object"})

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        return ToolOutcome(success=True, output="<p>a\x00b\ud800</p>", data={"raw": "\x00"})


class _CapturingBus:
    def __init__(self) -> None:
        self.published: list[bytes] = []

    async def publish(self, topic: object, message: ToolCallCompleted) -> None:
        self.published.append(message.model_dump_json().encode())


async def test_a_tool_result_with_nul_is_published_cleaned() -> None:
    """A page or document with a NUL byte: the worker's result is published (a failed
    publish would be redelivered forever, then dead-lettered) and carries clean text."""
    registry = ToolRegistry()
    registry.register(_PageWithNul())
    bus = _CapturingBus()
    worker = ToolWorker(bus, registry, "w1", ledger=None)  # type: ignore[arg-type]
    call = ToolCallRequested(
        tenant_id="t", session_id="s", request_id="r",
        data=ToolCallRequestedData(
            call_id="c1", tool_name="page", round=0, arguments={},
            deadline=datetime.now(UTC) + timedelta(seconds=30),
            context=ToolContext(user_id="u", agent_id="a", allowed_tools=["page"]),
        ),
    )  # fmt: skip
    await worker.handle(call)
    [raw] = bus.published
    result = ToolCallCompleted.model_validate_json(raw).data
    assert result.output == "<p>ab\ufffd</p>" and result.data == {"raw": ""}
