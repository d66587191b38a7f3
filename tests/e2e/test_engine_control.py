"""Stop, steer and double-texting through weft.agent.control.v1 (SPEC E-13, E-20, E-04)."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from functools import partial
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from httpx_sse import aconnect_sse
from redis.asyncio import Redis
from weft_contracts import (
    AgentConfig,
    CancelRequested,
    CancelRequestedData,
    ChatRequested,
    ChatRequestedData,
    Envelope,
    SteerMessage,
    SteerMessageData,
    Topic,
)
from weft_testkit import LocalStack, SseEvent, chat_requests, infra_env, read_turn
from weft_testkit.credentials import signed
from weft_testkit.kafka import client_options

AGENT = "builtin-smart-reasoning"


async def _publish(stack: LocalStack, message: Envelope, to: Topic = Topic.AGENT_CONTROL) -> None:
    producer = AIOKafkaProducer(**client_options(infra_env()))
    await producer.start()
    try:
        topic = stack.prefix + to.value
        message = signed(stack.credentials, message)  # as the gateway's records are
        await producer.send_and_wait(topic, message.model_dump_json().encode(), key=message.key())
    finally:
        await producer.stop()


async def _session(api: httpx.AsyncClient, agent: str = AGENT) -> str:
    return str((await api.post("/api/v1/sessions", json={"agent_id": agent})).json()["id"])


async def _run_with_control(
    api: httpx.AsyncClient,
    stack: LocalStack,
    query: str,
    trigger: str,
    control: Any,
    agent: str = AGENT,
    publish: Callable[[Envelope], Awaitable[None]] | None = None,
) -> list[SseEvent]:
    """Stream a turn; at the first ``trigger`` event publish ``control(event)`` (on the
    control topic unless ``publish`` says otherwise)."""
    session_id = await _session(api, agent)
    events: list[SseEvent] = []
    sent = False
    async with aconnect_sse(
        api, "POST", f"/api/v1/agent-chat/{session_id}", json={"query": query}, timeout=60
    ) as source:
        async for sse in source.aiter_sse():
            if not sse.event or not sse.data:
                continue
            data = json.loads(sse.data)
            events.append(SseEvent(sse.id, sse.event, data, 0.0))
            if sse.event == trigger and not sent:
                sent = True
                await (publish or partial(_publish, stack))(control(data))
            if sse.event == "complete":
                break
    return events


def _ids(event: dict[str, Any]) -> dict[str, str]:
    return {k: event[k] for k in ("tenant_id", "session_id", "request_id")}


async def test_stop_mid_answer_ends_the_turn_cancelled_at_once(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC E-20 cancel, E-04
    words = " ".join(f"w{i}" for i in range(300))
    await llm.post("/_script", json={
        "steps": [{"match": "STOPME", "content": words, "chunk_delay_ms": 150}],
        "fallback": "demo",
    })  # fmt: skip
    events = await asyncio.wait_for(
        _run_with_control(
            api, stack, "STOPME now", "final_answer",
            lambda e: CancelRequested(**_ids(e), data=CancelRequestedData()),
        ),
        30,
    )  # fmt: skip
    types = [e.event for e in events]
    assert types.count("complete") == 1 and types[-1] == "complete"
    assert events[-1].data["data"]["status"] == "cancelled", types
    streamed = sum(1 for t in types if t == "final_answer")
    assert streamed < 60, "the answer kept streaming after the stop"


async def test_steer_makes_the_first_answer_intermediate(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC E-13
    await llm.post("/_script", json={
        "steps": [
            # The steer is sent at the first thought, while the answer still streams.
            {"match": "STEERME", "reasoning": "thinking", "content": "first draft",
             "chunk_delay_ms": 800},
            {"match": "French", "content": "final, in French as asked"},
        ],
        "fallback": "demo",
    })  # fmt: skip
    events = await _run_with_control(
        api, stack, "STEERME please", "thought",
        lambda e: SteerMessage(**_ids(e), data=SteerMessageData(content="Answer in French.")),
    )  # fmt: skip
    complete = events[-1].data["data"]
    assert complete["status"] == "completed"
    assert complete["final_answer"] == "final, in French as asked"
    assert complete["steps"][0]["thought"] == "first draft"
    last = (await chat_requests(llm))[-1]["messages"]
    assert [m["content"] for m in last[-2:]] == ["first draft", "Answer in French."]
    # The steered round is closed by a superseded marker before the next round streams:
    # a client rebuilds the answer from the deltas after the last marker.
    answers = [e.data["data"] for e in events if e.event == "final_answer"]
    markers = [i for i, a in enumerate(answers) if a.get("superseded")]
    assert len(markers) == 1, answers
    marker = answers[markers[-1]]
    assert marker["done"] and marker["delta"] == "" and marker["round"] == 0
    assert "".join(a["delta"] for a in answers[: markers[-1]]) == "first draft"
    rebuilt = "".join(a["delta"] for a in answers[markers[-1] + 1 :])
    assert rebuilt == complete["final_answer"]
    assert all(a["round"] > marker["round"] for a in answers[markers[-1] + 1 :])
    # Memory stores the answer, not the superseded draft.
    session_id = events[-1].data["session_id"]
    stored = await _stored_answer(api, session_id)
    assert stored == complete["final_answer"]


async def _stored_answer(api: httpx.AsyncClient, session_id: str, timeout_s: float = 30) -> str:
    """Memory persists from Kafka: the assistant message once it is no longer running."""
    async with asyncio.timeout(timeout_s):
        while True:
            messages = (await api.get(f"/api/v1/sessions/{session_id}/messages")).json()
            done = [m for m in messages if m["role"] == "assistant" and m["status"] != "running"]
            if done:
                return str(done[-1]["content"])
            await asyncio.sleep(0.2)


async def test_a_steer_on_the_last_round_gets_one_overrun_round(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC E-13: one extra round to read the steer message
    """An agent of one round: the steered answer becomes intermediate, and the next call is
    an ordinary round that reads the steer, not the max-iterations synthesis."""
    resp = await api.post("/api/v1/agents", json={
        "name": "one round", "max_iterations": 1, "allowed_tools": [],
        "kb_selection_mode": "none",
    })  # fmt: skip
    assert resp.status_code == 201, resp.text
    await llm.post("/_script", json={
        "steps": [
            {"match": "LASTROUND", "reasoning": "thinking", "content": "first draft",
             "chunk_delay_ms": 800},
            {"match": "German", "content": "final, in German as asked"},
        ],
    })  # fmt: skip
    events = await _run_with_control(
        api, stack, "LASTROUND please", "thought",
        lambda e: SteerMessage(**_ids(e), data=SteerMessageData(content="Answer in German.")),
        agent=resp.json()["id"],
    )  # fmt: skip
    complete = events[-1].data["data"]
    assert complete["status"] == "completed"
    assert complete["final_answer"] == "final, in German as asked"
    assert complete["rounds"] == 2
    last = (await chat_requests(llm))[-1]
    assert "maximum number of reasoning steps" not in json.dumps(last["messages"])


async def _model_asked(llm: httpx.AsyncClient, text: str) -> None:
    """Wait until the scripted model has received a request that contains ``text``."""
    async with asyncio.timeout(30):
        while True:
            if any(text in json.dumps(r) for r in await chat_requests(llm)):
                return
            await asyncio.sleep(0.05)


async def test_a_second_message_waits_for_the_running_turn(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # double-texting "enqueue" (the default)
    await llm.post("/_script", json={
        "steps": [{"match": "FIRST", "content": "first answer", "delay_ms": 1500},
                  {"match": "SECOND", "content": "second answer"}],
        "fallback": "demo",
    })  # fmt: skip
    session_id = await _session(api)
    url = f"/api/v1/agent-chat/{session_id}"
    first = asyncio.create_task(
        read_turn(api, url, api_key=stack.api_key, json_body={"query": "FIRST one"})
    )
    await _model_asked(llm, "FIRST one")  # the first turn runs before the second is sent
    second = await read_turn(api, url, api_key=stack.api_key, json_body={"query": "SECOND one"})
    first_events = await first
    assert first_events[-1].data["data"]["final_answer"] == "first answer"
    assert second[-1].data["data"]["final_answer"] == "second answer"
    first_done = _position(first_events[-1].id)
    second_started = _position(next(e for e in second if e.event == "turn_started").id)
    assert second_started > first_done, "the second turn started before the first ended"
    # The queued turn starts the moment the first one completes: its history must hold
    # the first turn all the same (SPEC E-01, M-08), whether or not memory has recorded it.
    second_call = next(r for r in await chat_requests(llm) if "SECOND one" in json.dumps(r))
    replayed = [(m["role"], m.get("content")) for m in second_call["messages"]]
    assert ("user", "FIRST one") in replayed
    assert ("assistant", "first answer") in replayed
    # While it was being opened, the queued request was a pending start in Redis (a start
    # that failed would be retried from there); once open, nothing is left pending.
    redis = Redis.from_url(infra_env()["WEFT_REDIS_URL"])
    try:
        assert await redis.zcard(f"weft:{stack.prefix}engine:starts") == 0
    finally:
        await redis.aclose()


async def test_the_engine_rejects_a_message_the_gateway_let_through_to_a_busy_session(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # double-texting "reject", decided by the engine (the gateway's 409 can race)
    words = " ".join(f"w{i}" for i in range(20))
    await llm.post("/_script", json={
        "steps": [{"match": "BUSYFIRST", "content": words, "chunk_delay_ms": 100}],
        "fallback": "demo",
    })  # fmt: skip
    rejected = f"req_{secrets.token_hex(8)}"

    def second_message(event: dict[str, Any]) -> ChatRequested:
        data = ChatRequestedData(
            query="BUSYSECOND", user_id="dev", double_texting="reject",
            agent=AgentConfig(agent_id=AGENT, model="scripted"),
        )  # fmt: skip
        return ChatRequested(**{**_ids(event), "request_id": rejected}, data=data)

    async def publish_request(message: Envelope) -> None:
        await _publish(stack, message, to=Topic.AGENT_REQUESTS)

    first = await _run_with_control(
        api, stack, "BUSYFIRST go", "final_answer", second_message, publish=publish_request
    )
    assert first[-1].data["data"]["status"] == "completed"
    assert first[-1].data["data"]["final_answer"] == words, "the running turn was disturbed"
    assert {e.data["request_id"] for e in first} == {first[0].data["request_id"]}

    events = []
    async for value in _records_of(stack, [Topic.AGENT_EVENTS], rejected):
        events.append(value)
        if value["type"] == "complete":
            break
    assert [e["type"] for e in events] == ["error", "complete"]
    assert events[0]["data"]["code"] == "session_busy"
    assert events[1]["data"]["status"] == "failed"
    assert not any("BUSYSECOND" in json.dumps(r) for r in await chat_requests(llm))


def _position(entry_id: str) -> tuple[int, int]:
    ms, seq = entry_id.split("-")
    return int(ms), int(seq)


PAYMENT_QUESTION = "Which payment methods are accepted?"


class QuickSession:
    """A session of a quick-answer agent whose turns search ``knowledge_base``."""

    def __init__(self, api: httpx.AsyncClient, stack: LocalStack, knowledge_base: str):
        self.api, self.stack, self.knowledge_base = api, stack, knowledge_base
        self.session_id = ""

    async def open(self, agent_id: str = "builtin-quick-answer") -> QuickSession:
        resp = await self.api.post("/api/v1/sessions", json={"agent_id": agent_id})
        self.session_id = resp.json()["id"]
        return self

    async def ask(self, query: str) -> list[SseEvent]:
        return await read_turn(
            self.api, f"/api/v1/agent-chat/{self.session_id}", api_key=self.stack.api_key,
            json_body={"query": query, "knowledge_base_ids": [self.knowledge_base]},
        )  # fmt: skip


async def test_quick_answer_agent_retrieves_once_then_answers_without_the_loop(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient, knowledge_base: str
) -> None:  # SPEC A-01, C-04
    session = await QuickSession(api, stack, knowledge_base).open()
    events = await session.ask(PAYMENT_QUESTION)
    calls = [e.data["data"] for e in events if e.event == "tool_call"]
    assert [c["tool_name"] for c in calls] == ["search_knowledge"]
    assert calls[0]["arguments"] == {"query": PAYMENT_QUESTION}
    assert events[-1].data["data"]["status"] == "completed"
    requests = await chat_requests(llm)
    assert len(requests) == 1, "quick-answer makes exactly one generation"
    assert requests[0].get("tool_choice") == "none"


async def test_quick_answer_rewrites_a_follow_up_into_a_standalone_query(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient, knowledge_base: str
) -> None:  # SPEC C-04
    await llm.post("/_script", json={"steps": [
        {"content": "We accept cards and bank transfers."},
        {"match": "<question>", "content": "How long do card refunds take?"},
        {"content": "Refunds take five days."},
        {"match": "<question>", "error": {"status": 400, "message": "rewrite refused"}},
        {"content": "Yes, by bank transfer too."},
    ]})  # fmt: skip
    turn = (await QuickSession(api, stack, knowledge_base).open()).ask

    def searched(events: list[SseEvent]) -> list[dict[str, Any]]:
        return [e.data["data"]["arguments"] for e in events if e.event == "tool_call"]

    first = await turn(PAYMENT_QUESTION)
    assert searched(first) == [{"query": PAYMENT_QUESTION}]
    assert len(await chat_requests(llm)) == 1, "no history: no rewrite call"

    second = await turn("And how long do refunds take for them?")
    assert searched(second) == [{"query": "How long do card refunds take?"}]
    assert second[-1].data["data"]["final_answer"] == "Refunds take five days."
    streamed = [e for e in second if e.event in ("thought", "answer", "final_answer")]
    assert not any("card refunds" in json.dumps(e.data) for e in streamed), "rewrite is internal"
    rewrite = (await chat_requests(llm))[1]
    assert "tools" not in rewrite and rewrite["temperature"] == 0
    prompt = rewrite["messages"][-1]["content"]
    assert f"user: {PAYMENT_QUESTION}" in prompt
    assert "assistant: We accept cards and bank transfers." in prompt
    assert prompt.endswith("<question>And how long do refunds take for them?</question>")

    third = await turn("Can I pay in two instalments?")  # the rewrite fails: query as written
    assert searched(third) == [{"query": "Can I pay in two instalments?"}]
    assert third[-1].data["data"]["status"] == "completed"
    assert third[-1].data["data"]["final_answer"] == "Yes, by bank transfer too."
    assert len(await chat_requests(llm)) == 5


async def test_quick_answer_searches_the_web_beside_the_knowledge_base(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient, knowledge_base: str
) -> None:  # SPEC C-04: web x N, read-only calls in parallel, one generation
    resp = await api.post("/api/v1/agents", json={
        "name": "quick web", "mode": "quick-answer", "allowed_tools": ["search_knowledge"],
        "web_search_enabled": True, "web_search_max_results": 8,
    })  # fmt: skip
    assert resp.status_code == 201, resp.text
    session = await QuickSession(api, stack, knowledge_base).open(resp.json()["id"])
    events = await session.ask(PAYMENT_QUESTION)
    calls = [e.data["data"] for e in events if e.event == "tool_call"]
    assert [(c["tool_name"], c["arguments"]) for c in calls] == [
        ("search_knowledge", {"query": PAYMENT_QUESTION}),
        ("web_search", {"query": PAYMENT_QUESTION, "count": 8}),
    ]
    results = [e.data["data"]["tool_name"] for e in events if e.event == "tool_result"]
    assert sorted(results) == ["search_knowledge", "web_search"]
    assert events[-1].data["data"]["status"] == "completed"
    (generation,) = await chat_requests(llm)
    answered = [m["tool_call_id"] for m in generation["messages"] if m["role"] == "tool"]
    assert answered == [c["call_id"] for c in calls]  # both results, in the calls' order


async def test_context_overflow_sheds_history_and_retries_once(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC E-25
    """The session has two earlier turns; the retry after the provider's overflow sends
    fewer messages and still the question. A second overflow ends the turn: one retry."""
    await llm.post("/_script", json={
        "steps": [{"match": "OVERFLOW", "context_overflow": True},
                  {"match": "OVERFLOW", "content": "fits now"},
                  {"match": "TWICE", "context_overflow": True},
                  {"match": "TWICE", "context_overflow": True},
                  {"match": "TWICE", "content": "a third call was made"}],
        "fallback": "demo",
    })  # fmt: skip
    session_id = await _session(api)

    async def turn(query: str) -> dict[str, Any]:
        events = await read_turn(
            api, f"/api/v1/agent-chat/{session_id}", api_key=stack.api_key,
            json_body={"query": query},
        )  # fmt: skip
        complete: dict[str, Any] = events[-1].data["data"]
        return complete

    for earlier in ("What payment methods are accepted?", "How do refunds work?"):
        assert (await turn(earlier))["status"] == "completed"
    complete = await turn("OVERFLOW please")
    assert complete["status"] == "completed" and complete["final_answer"] == "fits now"
    overflowing, retry = _asked(await chat_requests(llm), "OVERFLOW please")
    assert len(retry["messages"]) < len(overflowing["messages"])
    assert "OVERFLOW please" in json.dumps(retry["messages"][-1])

    complete = await turn("TWICE please")
    assert complete["status"] == "failed"
    assert len(_asked(await chat_requests(llm), "TWICE please")) == 2


def _asked(requests: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """The requests whose last message holds ``text``."""
    return [r for r in requests if text in json.dumps(r["messages"][-1])]


async def test_database_query_sql_is_masked_in_events_but_runs_with_real_values(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC E-23 (SQL parameters masked), T-11
    name = f"masked-kb-{secrets.token_hex(4)}"
    created = await api.post("/api/v1/knowledge-bases", json={"name": name})
    assert created.status_code == 201, created.text
    sql = f"SELECT count(*) AS n FROM knowledge_bases WHERE name = '{name}'"
    await llm.post("/_script", json={
        "steps": [
            {"match": "MASKSQL",
             "tool_calls": [{"name": "database_query", "arguments": {"sql": sql}}]},
            {"match": "MASKSQL", "content": "counted"},
        ],
        "fallback": "demo",
    })  # fmt: skip
    agent = await api.post("/api/v1/agents", json={
        "name": "sql", "allowed_tools": ["database_query"], "kb_selection_mode": "none",
    })  # fmt: skip
    assert agent.status_code == 201, agent.text
    session_id = await _session(api, agent.json()["id"])
    events = await read_turn(
        api, f"/api/v1/agent-chat/{session_id}", api_key=stack.api_key,
        json_body={"query": "MASKSQL how many?"},
    )  # fmt: skip
    call = next(e for e in events if e.event == "tool_call").data["data"]
    result = next(e for e in events if e.event == "tool_result").data["data"]
    assert name not in json.dumps(call), "the SQL literal reached the event stream"
    assert "FROM knowledge_bases WHERE name = " in call["arguments"]["sql"]
    assert result["success"], result
    assert "1" in json.dumps(json.loads(result["output"])["rows"]), result["output"]
    sent = (await chat_requests(llm))[-1]["messages"]
    assistant = next(m for m in sent if m["role"] == "assistant" and m.get("tool_calls"))
    assert name in assistant["tool_calls"][0]["function"]["arguments"]  # the model keeps it


def _thought(n: int) -> dict[str, Any]:
    arguments = {"thought": f"step {n}", "next_thought_needed": True, "thought_number": n,
                 "total_thoughts": 2}  # fmt: skip
    return {"name": "thinking", "arguments": arguments, "id": f"call_think{n}"}


async def test_a_round_overlaps_read_only_calls_and_waits_at_a_barrier_in_order(
    api: httpx.AsyncClient, stack: LocalStack, llm: httpx.AsyncClient
) -> None:  # SPEC E-15
    """Calls [thinking, bad search, shell_exec, thinking] run as groups [[1, 2], [3], [4]]:
    the failing search does not cancel its sibling; shell_exec, a barrier, is outside the
    agent's tools (no write tool is offered to any agent yet), so it is refused without
    being dispatched (SPEC A-08) and the last call leaves once the read-only group before
    the barrier answered; the model reads the results in the calls' order. Groups around
    a barrier that runs: tests/unit/test_engine_steps.py."""
    calls = [
        _thought(1),
        {"name": "search_knowledge", "arguments": {"limit": 3}, "id": "call_search"},
        {"name": "shell_exec", "arguments": {"command": "true"}, "id": "call_shell"},
        _thought(2),
    ]
    await llm.post("/_script", json={
        "steps": [{"match": "GROUPS", "tool_calls": calls},
                  {"match": "GROUPS", "content": "all four answered"}],
    })  # fmt: skip
    agent = await api.post("/api/v1/agents", json={
        "name": "groups", "allowed_tools": ["thinking", "search_knowledge"],
    })  # fmt: skip
    assert agent.status_code == 201, agent.text
    session_id = await _session(api, agent.json()["id"])
    events = await read_turn(
        api, f"/api/v1/agent-chat/{session_id}", api_key=stack.api_key,
        json_body={"query": "GROUPS please"},
    )  # fmt: skip
    assert events[-1].data["data"]["final_answer"] == "all four answered"
    results = {
        e.data["data"]["call_id"]: e.data["data"] for e in events if e.event == "tool_result"
    }
    assert set(results) == {c["id"] for c in calls}
    assert not results["call_search"]["success"], "the bad search should fail"
    assert results["call_think1"]["success"] and results["call_think2"]["success"]

    read_back = (await chat_requests(llm))[-1]["messages"]
    tool_ids = [m["tool_call_id"] for m in read_back if m["role"] == "tool"]
    assert tool_ids == [c["id"] for c in calls]

    assert "its tools: search_knowledge, thinking" in results["call_shell"]["error"]

    sent, done = await _tool_traffic(stack, events[0].data["request_id"], len(calls) - 1)
    assert "call_shell" not in sent and "call_shell" not in done
    assert sent["call_think2"] >= max(done["call_think1"], done["call_search"])
    assert sent["call_search"] < done["call_think1"], "read-only calls should overlap"


async def _tool_traffic(
    stack: LocalStack, request_id: str, count: int
) -> tuple[dict[str, float], dict[str, float]]:
    """When each call of the turn was dispatched and when its result was sent (envelope
    times on the tool topics), by call id."""
    sent: dict[str, float] = {}
    done: dict[str, float] = {}
    topics = [Topic.TOOL_CALLS, Topic.SANDBOX_CALLS, Topic.TOOL_RESULTS]
    async for value in _records_of(stack, topics, request_id):
        when = datetime.fromisoformat(value["time"]).timestamp()
        side = done if value["type"] == "tool_call_completed" else sent
        side[value["data"]["call_id"]] = when
        if len(sent) >= count and len(done) >= count:
            break
    return sent, done


async def _records_of(
    stack: LocalStack, topics: list[Topic], request_id: str
) -> AsyncIterator[dict[str, Any]]:
    """The stack's records of one request on ``topics``, from the start; up to 30 s."""
    consumer = AIOKafkaConsumer(
        *(stack.prefix + t.value for t in topics),
        **client_options(infra_env()),
        group_id=f"test-records-{secrets.token_hex(4)}",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        async with asyncio.timeout(30):
            while True:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    for record in records:
                        value = _json_or_none(record.value)  # other tests put garbage here
                        if isinstance(value, dict) and value.get("request_id") == request_id:
                            yield value
    finally:
        await consumer.stop()


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None
