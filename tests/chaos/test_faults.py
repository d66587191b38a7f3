"""Every turn ends, exactly once, and nothing is lost when a part of Weft fails under load
(ARCHITECTURE invariants 1-3, SPEC E-04).

One fault per test, on one stack: concurrent sessions of turns that call two tools and then
stream a slow answer; when answers are mid-stream, the fault is injected (SIGKILL of a
service, of the broker or of Redis with its data deleted), and the process is started again
a few seconds later. Every client resumes with ``Last-Event-ID`` after a break. Then each
turn must have ended with exactly one ``complete``, every event once and in ``seq`` order
without a gap, no fabricated tool timeout, both messages stored, and a completed answer
stored exactly as streamed. What a fault may cost is in ``ALLOWED``: nothing, except that
losing Redis's contents may end a running turn with ``turn_state_lost``.

Size: ``WEFT_CHAOS_SESSIONS`` x ``WEFT_CHAOS_TURNS`` (``make test``: 8 x 2 and the faults
in ``REDUCED``; ``make test-full``: 40 x 3 and every fault). Outcomes and recovery times
are written to ``$WEFT_CHAOS_HOME/chaos/<fault>.json`` (docs/operations.md quotes them).
``WEFT_CHAOS_REPEAT=N`` runs each selected fault N times on the same stack (ids
``engine-1`` .. ``engine-N``, results ``<fault>-<i>.json``): a rare hole shows only under
repetition (``WEFT_CHAOS_FAULTS=engine WEFT_CHAOS_REPEAT=20``, outside ``make test``).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import pytest
from weft_testkit import LocalStack

from tests.chaos.conftest import PrivateInfra, chaos_home
from tests.chaos.harness import (
    ChaosClient,
    LoadShape,
    TurnRecord,
    mid_answer,
    run_load,
    storage_problems,
    stored_messages,
    stream_problems,
    summary,
)

SHAPE = LoadShape(
    sessions=int(os.environ.get("WEFT_CHAOS_SESSIONS", "8")),
    turns=int(os.environ.get("WEFT_CHAOS_TURNS", "2")),
    turn_timeout_s=float(os.environ.get("WEFT_CHAOS_TURN_TIMEOUT_S", "120")),
)
RESTART_AFTER_S = 3.0
KAFKA_DOWN_S = 10.0
STORED_WAIT_S = 60.0


@dataclass(frozen=True)
class Fault:
    name: str
    inject: Callable[[LocalStack, PrivateInfra], None]
    recover: Callable[[LocalStack, PrivateInfra], None]
    down_s: float = RESTART_AFTER_S


def _kill(service: str) -> Fault:
    def inject(stack: LocalStack, _: PrivateInfra) -> None:
        stack.kill(service, 0, signal.SIGKILL)

    return Fault(service, inject, lambda stack, _: stack.start_again(service, 0))


def _kill_redis(stack: LocalStack, infra: PrivateInfra) -> None:
    os.kill(infra.pid("redis"), signal.SIGKILL)
    infra.wipe_redis_data()


def _kill_kafka(stack: LocalStack, infra: PrivateInfra) -> None:
    os.kill(infra.pid("kafka"), signal.SIGKILL)


def _signal_kafka(sig: signal.Signals) -> Callable[[LocalStack, PrivateInfra], None]:
    def send(stack: LocalStack, infra: PrivateInfra) -> None:
        os.kill(infra.pid("kafka"), sig)

    return send


FAULTS = [
    _kill("tool_exec"),
    _kill("memory"),
    _kill("gateway"),
    _kill("engine"),
    Fault("kafka", _kill_kafka, lambda _, infra: infra.run("up", "kafka"), KAFKA_DOWN_S),
    Fault(
        "kafka_stopped",  # a controlled shutdown (SIGTERM), then a start
        lambda _, infra: infra.run("down", "kafka"),
        lambda _, infra: infra.run("up", "kafka"),
        KAFKA_DOWN_S,
    ),
    # A broker that stops answering without closing its connections (a long GC pause, a
    # frozen VM): requests time out instead of being refused.
    Fault(
        "kafka_frozen",
        _signal_kafka(signal.SIGSTOP),
        _signal_kafka(signal.SIGCONT),
        KAFKA_DOWN_S,
    ),
    Fault("redis", _kill_redis, lambda _, infra: infra.run("up", "redis")),
]
REDUCED = "tool_exec,memory,gateway,engine,kafka_stopped,redis"
"""The faults of ``make test``; ``make test-full`` runs every one (``WEFT_CHAOS_FAULTS=all``)."""
_chosen = os.environ.get("WEFT_CHAOS_FAULTS", REDUCED)
_repeat = int(os.environ.get("WEFT_CHAOS_REPEAT", "1"))
SELECTED = [f for f in FAULTS if _chosen == "all" or f.name in _chosen.split(",")]
RUNS = [(f, i) for f in SELECTED for i in range(1, _repeat + 1)]
ALLOWED_ERRORS: dict[str, set[str]] = {"redis": {"turn_state_lost"}}
"""Error codes a fault may end a running turn with; any other failure is a finding."""


@pytest.mark.timeout(SHAPE.turn_timeout_s * SHAPE.turns + 300)
@pytest.mark.parametrize(
    ("fault", "run"), RUNS, ids=[f.name if _repeat == 1 else f"{f.name}-{i}" for f, i in RUNS]
)
async def test_every_turn_ends_once_and_nothing_is_lost(
    fault: Fault,
    run: int,
    chaos_stack: LocalStack,
    private_infra: PrivateInfra,
    chaos_agent: str,
    api: httpx.AsyncClient,
) -> None:
    await _all_ready(chaos_stack)
    client = ChaosClient(chaos_stack.gateway_url, chaos_stack.api_key)
    records: list[TurnRecord] = []
    tag = f"{fault.name} run {run}"
    load = asyncio.create_task(run_load(client, chaos_agent, SHAPE, tag, records))
    await _until(lambda: mid_answer(records) >= max(1, SHAPE.sessions // 3), load, 120)
    fault_at = time.monotonic()
    await asyncio.to_thread(fault.inject, chaos_stack, private_infra)
    await asyncio.sleep(fault.down_s)
    await asyncio.to_thread(fault.recover, chaos_stack, private_infra)
    recovered_at = time.monotonic()
    await asyncio.wait_for(load, timeout=SHAPE.turn_timeout_s * SHAPE.turns + 60)

    problems: dict[str, list[str]] = {}
    for record in records:
        found = stream_problems(record)
        allowed = ALLOWED_ERRORS.get(fault.name, set())
        unexpected = [code for code in record.error_codes if code not in allowed]
        if record.status != "completed" and (unexpected or not record.error_codes):
            found.append(f"ended {record.status} with errors {record.error_codes}")
        if found:
            problems[record.query] = found
    for session_id in {r.session_id for r in records}:
        mine = [r for r in records if r.session_id == session_id and r.request_id]
        messages = await _settled_messages(api, session_id)
        for record in mine:
            found = storage_problems(record, messages)
            if found:
                problems.setdefault(record.query, []).extend(found)

    result = summary(records, fault_at)
    result |= {
        "fault": fault.name,
        "down_s": fault.down_s,
        "restart_took_s": round(recovered_at - fault_at - fault.down_s, 1),
        "shape": {"sessions": SHAPE.sessions, "turns": SHAPE.turns},
        "problems": problems,
        "load_average": os.getloadavg(),
    }
    _write(fault.name if _repeat == 1 else f"{fault.name}-{run}", result)
    print(json.dumps(result, indent=2))
    assert result["turns"] == SHAPE.sessions * SHAPE.turns, result
    assert not problems, json.dumps(problems, indent=2)[:6000]


async def _until(condition: Callable[[], bool], load: asyncio.Task[None], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if load.done():
            load.result()
            raise AssertionError("the load ended before the fault could be injected")
        if time.monotonic() > deadline:
            raise AssertionError("no answer was streaming: the fault would miss the turns")
        await asyncio.sleep(0.05)


async def _all_ready(stack: LocalStack) -> None:
    """Every process answers /readyz (the previous fault's restart is over)."""
    deadline = time.monotonic() + 120
    async with httpx.AsyncClient(timeout=3) as http:
        for name, ports in stack.ports.items():
            for port in ports:
                while True:
                    try:
                        if (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    assert time.monotonic() < deadline, f"{name}:{port} not ready"
                    await asyncio.sleep(0.5)


async def _settled_messages(api: httpx.AsyncClient, session_id: str) -> list[dict[str, object]]:
    """The session's stored messages once memory has recorded every turn's end (memory
    consumes the events asynchronously), or as they are after ``STORED_WAIT_S``."""
    deadline = time.monotonic() + STORED_WAIT_S
    while True:
        try:
            messages = await stored_messages(api, session_id)
        except httpx.HTTPError:
            messages = []
        settled = messages and all(m.get("status") != "running" for m in messages)
        if settled or time.monotonic() > deadline:
            return messages
        await asyncio.sleep(0.5)


def _write(name: str, result: dict[str, object]) -> None:
    folder = chaos_home() / "chaos"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(result, indent=2))
