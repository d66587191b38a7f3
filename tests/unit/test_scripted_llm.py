"""The scripted LLM test double, served for real by uvicorn, driven by the `openai` client."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import uvicorn
from fastapi import FastAPI
from weft_scripted_llm import Settings, create_app

QUESTION = "What is the refund policy for annual plans?"
SEARCH_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "search_knowledge",
        "description": "Search the knowledge base.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    },
}
SEARCH_RESULTS = {
    "query": QUESTION,
    "results": [
        {
            "id": "c7",
            "doc": "d2",
            "title": "Shipping guide",
            "content": "Orders ship worldwide within five business days.",
        },
        {
            "id": "c1",
            "doc": "d1",
            "title": "Billing FAQ",
            "content": "Annual plans can be refunded within 30 days of purchase. "
            "Monthly plans are not refundable.",
        },
    ],
}


class RunningServer:
    """An app served by uvicorn in a thread, on a socket bound before it starts.

    The socket listens before the thread starts, so clients may connect at once: the
    kernel queues them until uvicorn accepts (no readiness polling).
    """

    def __init__(self, app: FastAPI) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(128)
        self.base_url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    def __enter__(self) -> RunningServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()
        assert not self._thread.is_alive(), "uvicorn did not stop"


@pytest.fixture(scope="session")
def server() -> Iterator[RunningServer]:
    with RunningServer(create_app(Settings(policy="demo"))) as running:
        yield running


@pytest.fixture
async def control(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    """A plain HTTP client for the control endpoints; the server is reset before each test."""
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        (await client.post("/_reset")).raise_for_status()
        yield client


@pytest.fixture
async def llm(
    server: RunningServer, control: httpx.AsyncClient
) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(
        base_url=f"{server.base_url}/v1", api_key="x", max_retries=0, timeout=10
    )
    yield client
    await client.close()


async def load(control: httpx.AsyncClient, script: Any) -> None:
    (await control.post("/_script", json=script)).raise_for_status()


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


async def stream_chunks(client: openai.AsyncOpenAI, **kwargs: Any) -> list[Any]:
    kwargs.setdefault("model", "scripted")
    kwargs.setdefault("messages", user("hi"))
    stream: Any = await client.chat.completions.create(stream=True, **kwargs)
    return [chunk async for chunk in stream]


def joined(chunks: list[Any], field: str) -> str:
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    return "".join(getattr(d, field, None) or "" for d in deltas)


def finish_reason(chunks: list[Any]) -> str | None:
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
    return next((r for r in reasons if r), None)


def assembled_tool_calls(chunks: list[Any]) -> dict[int, dict[str, str]]:
    """Tool calls put together from their deltas, as a client does."""
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += delta.id or ""
            call["name"] += (delta.function and delta.function.name) or ""
            call["arguments"] += (delta.function and delta.function.arguments) or ""
    return calls


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def test_root_probes_and_models_say_test_double(control: httpx.AsyncClient) -> None:
    root = (await control.get("/")).json()
    assert root["kind"] == "test double"
    assert "TEST DOUBLE" in root["description"]
    assert (await control.get("/healthz")).status_code == 200
    assert (await control.get("/readyz")).status_code == 200


async def test_models_list_names_the_test_double(llm: openai.AsyncOpenAI) -> None:
    models = [m async for m in llm.models.list()]
    assert {m.id for m in models} >= {"weft-scripted-test-double"}
    assert all("test double" in m.owned_by for m in models)


async def test_streaming_content_in_pieces_with_usage_chunk(
    control: httpx.AsyncClient, llm: openai.AsyncOpenAI
) -> None:
    text = "Hello there, this answer comes from the script in several pieces."
    await load(control, [{"content": text}])
    messages = user("hello")
    chunks = await stream_chunks(llm, messages=messages, stream_options={"include_usage": True})
    assert joined(chunks, "content") == text
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 1
    assert finish_reason(chunks) == "stop"
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.prompt_tokens == math.ceil(len(json.dumps(messages)) / 4)
    assert last.usage.completion_tokens == math.ceil(len(text) / 4)
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])


async def test_no_usage_chunk_unless_asked(
    control: httpx.AsyncClient, llm: openai.AsyncOpenAI
) -> None:
    await load(control, [{"content": "short"}])
    chunks = await stream_chunks(llm)
    assert all(c.choices for c in chunks)


async def test_reasoning_content_deltas_come_before_content(
    control: httpx.AsyncClient, llm: openai.AsyncOpenAI
) -> None:
    await load(control, [{"reasoning": ["Let me ", "think."], "content": "Answer."}])
    chunks = await stream_chunks(llm)
    assert joined(chunks, "reasoning_content") == "Let me think."
    kinds = [
        "reasoning" if getattr(c.choices[0].delta, "reasoning_content", None) else "content"
        for c in chunks
        if getattr(c.choices[0].delta, "reasoning_content", None) or c.choices[0].delta.content
    ]
    assert kinds == ["reasoning", "reasoning", "content"]


async def test_tool_calls_stream_like_openai_and_keep_broken_json(
    control: httpx.AsyncClient, llm: openai.AsyncOpenAI
) -> None:
    broken = '{"query": "refunds", "limit": 3'
    steps = [
        {
            "tool_calls": [
                {"name": "search_knowledge", "arguments": broken, "id": "call_broken"},
                {"name": "get_time", "arguments": {"zone": "UTC"}},
            ]
        }
    ]
    await load(control, steps)
    chunks = await stream_chunks(llm)
    calls = assembled_tool_calls(chunks)
    assert calls[0] == {"id": "call_broken", "name": "search_knowledge", "arguments": broken}
    assert calls[1]["name"] == "get_time"
    assert calls[1]["id"]
    assert json.loads(calls[1]["arguments"]) == {"zone": "UTC"}
    assert finish_reason(chunks) == "tool_calls"
    tool_deltas = [d for c in chunks for d in (c.choices[0].delta.tool_calls or [])]
    head = tool_deltas[0]
    assert (head.index, head.type, head.function.name, head.function.arguments) == (
        0,
        "function",
        "search_knowledge",
        "",
    )
    pieces = [d for d in tool_deltas if d.index == 0 and d.function.arguments]
    assert len(pieces) > 1
    assert all(d.id is None and d.function.name is None for d in pieces)


@pytest.mark.parametrize("reason", ["stop", "length", "content_filter", "tool_calls"])
async def test_each_finish_reason_streamed_and_not(
    control: httpx.AsyncClient, llm: openai.AsyncOpenAI, reason: str
) -> None:
    step = {"content": "partial", "finish_reason": reason}
    await load(control, [step, step])
    assert finish_reason(await stream_chunks(llm)) == reason
    completion = await llm.chat.completions.create(model="m", messages=user("hi"))
    assert completion.choices[0].finish_reason == reason


async def test_non_streaming_completion_with_everything(
    control: httpx.AsyncClient, llm: openai.AsyncOpenAI
) -> None:
    step = {
        "reasoning": "Thinking it over.",
        "content": "Here you go.",
        "tool_calls": [{"name": "lookup", "arguments": "not json", "id": "call_1"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7},
    }
    await load(control, [step])
    completion = await llm.chat.completions.create(model="my-model", messages=user("hi"))
    choice = completion.choices[0]
    assert completion.model == "my-model"
    assert choice.message.content == "Here you go."
    assert (choice.message.model_extra or {})["reasoning_content"] == "Thinking it over."
    tool_call: Any = (choice.message.tool_calls or [])[0]
    assert (tool_call.id, tool_call.function.name, tool_call.function.arguments) == (
        "call_1",
        "lookup",
        "not json",
    )
    assert choice.finish_reason == "tool_calls"
    assert completion.usage is not None
    assert completion.usage.model_dump(include={"prompt_tokens", "completion_tokens"}) == {
        "prompt_tokens": 11,
        "completion_tokens": 7,
    }
    assert completion.usage.total_tokens == 18


async def test_embeddings_are_deterministic_normalised_and_similar(
    llm: openai.AsyncOpenAI,
) -> None:
    texts = [
        "Annual plans can be refunded within 30 days",
        "annual plans refunded within thirty days",
        "The cat sat on the mat near the window",
    ]
    first = await llm.embeddings.create(model="emb", input=texts)
    again = await llm.embeddings.create(model="emb", input=texts[0], encoding_format="float")
    vectors = [d.embedding for d in first.data]
    assert [len(v) for v in vectors] == [256, 256, 256]
    assert all(math.isclose(cosine(v, v), 1.0, rel_tol=1e-5) for v in vectors)
    assert again.data[0].embedding == pytest.approx(vectors[0], rel=1e-6)
    assert cosine(vectors[0], vectors[1]) > 0.5 > cosine(vectors[0], vectors[2])


async def test_embeddings_honour_dimensions(llm: openai.AsyncOpenAI) -> None:
    result = await llm.embeddings.create(model="emb", input="hello world", dimensions=64)
    assert len(result.data[0].embedding) == 64


async def test_rate_limit_error_with_retry_after(
    control: httpx.AsyncClient, llm: openai.AsyncOpenAI
) -> None:
    await load(control, [{"error": {"status": 429, "message": "slow down", "retry_after": 2}}])
    with pytest.raises(openai.RateLimitError) as caught:
        await llm.chat.completions.create(model="m", messages=user("hi"))
    assert caught.value.status_code == 429
    assert caught.value.response.headers["retry-after"] == "2"
    assert caught.value.body == {
        "message": "slow down",
        "type": "rate_limit_error",
        "param": None,
        "code": "rate_limit_exceeded",
    }


async def test_rate_limit_is_retried_by_the_client(
    server: RunningServer, control: httpx.AsyncClient
) -> None:
    steps = [{"error": {"status": 429, "retry_after": 0.01}}, {"content": "after retry"}]
    await load(control, steps)
    client = openai.AsyncOpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=1)
    completion = await client.chat.completions.create(model="m", messages=user("hi"))
    await client.close()
    assert completion.choices[0].message.content == "after retry"
    assert len((await control.get("/_requests")).json()["requests"]) == 2


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
        (400, openai.BadRequestError),
    ],
)
async def test_scripted_errors(
    control: httpx.AsyncClient, llm: openai.AsyncOpenAI, status: int, error: type[Exception]
) -> None:
    await load(control, [{"error": {"status": status, "message": f"boom {status}"}}])
    with pytest.raises(error, match=f"boom {status}"):
        await llm.chat.completions.create(model="m", messages=user("hi"), stream=True)


async def test_context_overflow(control: httpx.AsyncClient, llm: openai.AsyncOpenAI) -> None:
    await load(control, [{"context_overflow": True}])
    with pytest.raises(openai.BadRequestError) as caught:
        await llm.chat.completions.create(model="m", messages=user("hi"))
    assert caught.value.code == "context_length_exceeded"


async def test_stall_after_chunks_hangs_until_client_timeout(
    control: httpx.AsyncClient, llm: openai.AsyncOpenAI
) -> None:
    await load(control, [{"content": "one two three four five six seven", "stall_after_chunks": 2}])
    received: list[Any] = []
    stream = await llm.chat.completions.create(
        model="m", messages=user("hi"), stream=True, timeout=1.0
    )
    with pytest.raises(openai.APITimeoutError):
        async for chunk in stream:
            received.append(chunk)
    assert len(received) == 2


async def test_stall_without_streaming_hangs_until_client_timeout(
    control: httpx.AsyncClient, llm: openai.AsyncOpenAI
) -> None:
    await load(control, [{"content": "never sent", "stall_after_chunks": 0}])
    with pytest.raises(openai.APITimeoutError):
        await llm.chat.completions.create(model="m", messages=user("hi"), timeout=1.0)


async def test_an_unpaced_stream_is_one_body_and_a_paced_one_is_streamed(
    server: RunningServer, control: httpx.AsyncClient, llm: openai.AsyncOpenAI
) -> None:
    """Without pacing the stream is one body (every SSE event still decodes);
    with `chunk_delay_ms` it is streamed in chunks."""
    body = {"model": "m", "messages": user("hi"), "stream": True}
    paced = {"content": ["a", "b"], "chunk_delay_ms": 1}
    for step, framing in (
        ({"content": ["a", "b"]}, "content-length"),
        (paced, "transfer-encoding"),
    ):
        await load(control, [step])
        response = await control.post(f"{server.base_url}/v1/chat/completions", json=body)
        assert framing in response.headers
        assert response.text.count("data: ") >= 4 and response.text.endswith("data: [DONE]\n\n")
    await load(control, [{"content": ["a", "b", "c"]}])
    assert joined(await stream_chunks(llm), "content") == "abc"


async def test_delays_before_first_byte_and_between_chunks(
    control: httpx.AsyncClient, llm: openai.AsyncOpenAI
) -> None:
    await load(control, [{"content": ["a", "b", "c"], "delay_ms": 150, "chunk_delay_ms": 50}])
    started = time.monotonic()
    chunks = await stream_chunks(llm)
    elapsed = time.monotonic() - started
    assert joined(chunks, "content") == "abc"
    assert elapsed >= 0.15 + 0.05 * (len(chunks) - 1)


async def test_exhausted_script_is_a_clear_error_not_retried(
    server: RunningServer, control: httpx.AsyncClient
) -> None:
    await load(control, [])
    client = openai.AsyncOpenAI(base_url=f"{server.base_url}/v1", api_key="x", max_retries=2)
    with pytest.raises(openai.InternalServerError, match="scripted LLM: script exhausted"):
        await client.chat.completions.create(model="m", messages=user("hi"), stream=True)
    await client.close()
    assert len((await control.get("/_requests")).json()["requests"]) == 1


async def test_match_picks_a_step_else_the_next_unmatched_one(
    control: httpx.AsyncClient, llm: openai.AsyncOpenAI
) -> None:
    await load(control, [{"match": "WEATHER", "content": "sunny"}, {"content": "generic"}])

    async def ask(text: str) -> str | None:
        completion = await llm.chat.completions.create(model="m", messages=user(text))
        return completion.choices[0].message.content

    assert await ask("hello") == "generic"
    assert await ask("how is the weather?") == "sunny"
    with pytest.raises(openai.InternalServerError, match="script exhausted"):
        await ask("weather again")


async def test_conversation_keys_have_their_own_queues(
    control: httpx.AsyncClient, llm: openai.AsyncOpenAI
) -> None:
    script = {
        "steps": [{"content": "global"}],
        "conversations": {"a": [{"content": "for a"}], "b": [{"content": "for b"}]},
    }
    await load(control, script)

    async def ask(**kwargs: Any) -> str | None:
        completion = await llm.chat.completions.create(model="m", messages=user("hi"), **kwargs)
        content: str | None = completion.choices[0].message.content
        return content

    assert await ask(user="b") == "for b"
    assert await ask(extra_headers={"X-Scripted-LLM-Conversation": "a"}) == "for a"
    assert await ask(user="unknown") == "global"
    status = (await control.get("/_script")).json()
    assert status["remaining"] == 0
    assert status["remaining_by_conversation"] == {"a": 0, "b": 0}


async def test_requests_are_recorded_and_reset(
    control: httpx.AsyncClient, llm: openai.AsyncOpenAI
) -> None:
    await load(control, [{"content": "ok"}])
    await llm.chat.completions.create(model="m", messages=user("record me"), user="conv-1")
    await llm.embeddings.create(model="emb", input="x")
    recorded = (await control.get("/_requests")).json()["requests"]
    assert [r["path"] for r in recorded] == ["/v1/chat/completions", "/v1/embeddings"]
    assert recorded[0]["body"]["messages"] == user("record me")
    assert recorded[0]["conversation_key"] == "conv-1"
    assert (await control.post("/_reset")).json() == {"policy": "demo"}
    assert (await control.get("/_requests")).json() == {"requests": []}


async def test_recorded_requests_carry_the_doubles_own_service_time(
    control: httpx.AsyncClient, llm: openai.AsyncOpenAI
) -> None:
    """`answered_at - received_at` is what bench/engine_bench.py takes off a round's gap:
    an injected delay is inside it; a request that never got an answer has none."""
    await load(control, [{"content": "ok", "delay_ms": 120}])
    await llm.chat.completions.create(model="m", messages=user("timed"))
    with pytest.raises(openai.BadRequestError):
        await llm.post("/chat/completions", body={"messages": "not a list"}, cast_to=object)
    timed, invalid = (await control.get("/_requests")).json()["requests"]
    # The stamps are wall-clock (time.time), the delay is slept on the loop's monotonic
    # clock: the two may disagree by a fraction of a millisecond (0.1199 s was seen).
    assert timed["answered_at"] - timed["received_at"] >= 0.115
    assert invalid["body"] is None and invalid["answered_at"] is None
    # The whole exchange inside the app: from before routing to the last byte sent.
    assert timed["entered_at"] <= timed["received_at"] <= timed["answered_at"]
    assert timed["answered_at"] <= timed["sent_at"]


async def test_the_last_byte_of_a_paced_stream_is_when_the_exchange_left_the_double(
    control: httpx.AsyncClient, llm: openai.AsyncOpenAI
) -> None:
    """`answered_at` is when a paced stream started; `sent_at` when its last event left."""
    await load(control, [{"content": "one two three four", "chunk_delay_ms": 40}])
    stream = await llm.chat.completions.create(model="m", messages=user("paced"), stream=True)
    chunks = [chunk async for chunk in stream]
    [entry] = (await control.get("/_requests")).json()["requests"]
    assert entry["sent_at"] - entry["answered_at"] >= 0.04 * (len(chunks) - 2)


async def test_invalid_script_and_invalid_request_are_400(
    control: httpx.AsyncClient, llm: openai.AsyncOpenAI
) -> None:
    response = await control.post("/_script", json=[{"content": "x", "unknown_field": 1}])
    assert response.status_code == 400
    assert "invalid script" in response.json()["error"]["message"]
    bad = await control.post("/v1/chat/completions", content=b"{not json")
    assert bad.status_code == 400
    assert bad.json()["error"]["type"] == "invalid_request_error"


async def test_demo_policy_searches_then_answers_with_citations(llm: openai.AsyncOpenAI) -> None:
    messages: list[Any] = [
        {"role": "system", "content": "You answer from the knowledge base."},
        *user(QUESTION),
    ]
    first = await stream_chunks(llm, messages=messages, tools=[SEARCH_TOOL])
    assert "search the knowledge base" in joined(first, "reasoning_content")
    assert finish_reason(first) == "tool_calls"
    call = assembled_tool_calls(first)[0]
    assert call["name"] == "search_knowledge"
    assert json.loads(call["arguments"]) == {"query": QUESTION}

    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(SEARCH_RESULTS)},
    ]
    second = await stream_chunks(llm, messages=messages, tools=[SEARCH_TOOL])
    answer = joined(second, "content")
    assert joined(second, "reasoning_content")
    assert finish_reason(second) == "stop"
    assert sum(1 for c in second if c.choices[0].delta.content) > 3
    assert "Annual plans can be refunded within 30 days of purchase [c1]." in answer
    assert "[c7]" not in answer
    assert answer.splitlines()[-1] == "Sources: [c1] Billing FAQ"


async def test_demo_policy_says_when_the_knowledge_base_has_nothing(
    llm: openai.AsyncOpenAI,
) -> None:
    messages: list[Any] = [
        *user("Who won the 1954 chess olympiad?"),
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"query": "x", "results": []}'},
    ]
    completion = await llm.chat.completions.create(
        model="m",
        messages=messages,
        tools=[SEARCH_TOOL],
    )
    assert completion.choices[0].message.content == (
        'The knowledge base has nothing on "Who won the 1954 chess olympiad?".'
    )


async def test_demo_policy_without_tools_echoes_and_summarises(llm: openai.AsyncOpenAI) -> None:
    echo = await llm.chat.completions.create(model="m", messages=user("Is anyone there?"))
    assert 'You asked: "Is anyone there?"' in (echo.choices[0].message.content or "")
    summary_request: list[Any] = [
        {"role": "system", "content": "Summarize the conversation in one paragraph."},
        *user("We planned the launch for May. Marketing is ready."),
        {"role": "assistant", "content": "Great, the launch date is set."},
    ]
    summary = await llm.chat.completions.create(model="m", messages=summary_request)
    assert summary.choices[0].message.content == (
        "Summary: We planned the launch for May. Great, the launch date is set."
    )


async def test_script_file_given_at_startup_is_played_and_rewound(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text("- content: first\n- content: second\n", encoding="utf-8")
    app = create_app(Settings(policy="script", script_path=script))
    with RunningServer(app) as running:
        client = openai.AsyncOpenAI(base_url=f"{running.base_url}/v1", api_key="x", max_retries=0)
        answers = [
            (await client.chat.completions.create(model="m", messages=user("hi")))
            .choices[0]
            .message.content
            for _ in range(2)
        ]
        async with httpx.AsyncClient(base_url=running.base_url) as control:
            assert (await control.post("/_reset")).json()["remaining"] == 2
        await client.close()
    assert answers == ["first", "second"]
