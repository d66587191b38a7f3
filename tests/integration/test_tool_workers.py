"""tool-exec workers over the real Kafka, Redis and PostgreSQL (invariant 3).

Calls spread over the workers of one consumer group; a worker killed mid-call hands a
read-only call to another worker, which runs it again; a write call found started by a
dead worker is reported "outcome unknown", never replayed.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from weft_contracts import ToolCallRequested, ToolCallRequestedData, ToolContext
from weft_platform.runtime import ServiceRuntime
from weft_testkit.tool_workers import ToolCallClient, ToolWorkerPool
from weft_tool_catalog import ToolInvocation, ToolOutcome, ToolRegistry, ToolSpec
from weft_tool_exec.ledger import CallLedger
from weft_tool_exec.worker import ToolWorker

from tests.integration.kafka_helpers import service_runtime

LOG_DIR = Path(".weft/logs/e2e")
THINK = {"thought": "t", "next_thought_needed": False, "thought_number": 1, "total_thoughts": 1}


class _Slow(BaseHTTPRequestHandler):
    """Answers only when the test releases it; counts requests."""

    arrived: list[threading.Event] = []
    release = threading.Event()

    def do_GET(self) -> None:
        _Slow.arrived[min(len(_Slow.arrived) - 1, sum(e.is_set() for e in _Slow.arrived))].set()
        _Slow.release.wait(timeout=120)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"slow page body")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slow_server() -> Iterator[int]:
    _Slow.arrived = [threading.Event(), threading.Event()]
    _Slow.release = threading.Event()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    _Slow.release.set()
    httpd.shutdown()


@pytest.fixture
def pool(infra: dict[str, str]) -> Iterator[ToolWorkerPool]:
    workers = ToolWorkerPool(
        LOG_DIR,
        extra_env={"WEFT_TOOL_CONCURRENCY": "1", "WEFT_WEB_FETCH_ALLOW_LOOPBACK": "true"},
    )
    yield workers
    workers.stop()


async def test_calls_spread_over_the_workers_of_the_group(pool: ToolWorkerPool) -> None:
    pool.start("worker-a")
    pool.start("worker-b")
    async with ToolCallClient(pool.prefix) as client:
        ids = [await client.send("thinking", THINK) for _ in range(16)]
        await client.wait_for(ids, timeout_s=120)
    workers = {client.results[c][0]["worker"] for c in ids}
    assert workers == {"worker-a", "worker-b"}
    assert all(client.results[c][0]["success"] for c in ids)


async def test_read_only_call_of_a_killed_worker_runs_again_elsewhere(  # invariant 3
    pool: ToolWorkerPool, slow_server: int
) -> None:
    pool.start("worker-a")
    async with ToolCallClient(pool.prefix) as client:
        url = f"http://127.0.0.1:{slow_server}/page"
        call_id = await client.send("web_fetch", {"items": [{"url": url}]})
        assert await asyncio.to_thread(_Slow.arrived[0].wait, 60)  # worker-a is mid-call
        # Process control blocks; keep the event loop (the result consumer) running.
        await asyncio.to_thread(pool.start, "worker-b")
        await asyncio.to_thread(pool.kill, "worker-a")
        assert await asyncio.to_thread(_Slow.arrived[1].wait, 120)  # worker-b took it over
        _Slow.release.set()
        await client.wait_for([call_id], timeout_s=60)
    result = client.results[call_id][0]
    assert result["worker"] == "worker-b" and result["success"], result
    assert "slow page body" in result["output"]


class WriteTool:
    spec = ToolSpec(
        name="send_email", description="d", parameters={"type": "object"}, read_only=False
    )

    def __init__(self) -> None:
        self.runs = 0

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        self.runs += 1
        return ToolOutcome(success=True, output="sent")


@pytest.fixture
async def runtime(infra: dict[str, str]) -> AsyncIterator[ServiceRuntime]:
    async with service_runtime(infra, "tool-worker-test", partitions=1, start=True) as rt:
        yield rt


def _write_call() -> ToolCallRequested:
    return ToolCallRequested(
        tenant_id="t", session_id="s", request_id="r",
        data=ToolCallRequestedData(
            call_id=f"call_{secrets.token_hex(4)}", tool_name="send_email", arguments={},
            round=0, deadline=datetime.now(UTC) + timedelta(seconds=30),
            context=ToolContext(user_id="u", agent_id="a", allowed_tools=["send_email"]),
        ),
    )  # fmt: skip


async def test_write_call_started_by_a_dead_worker_is_reported_not_replayed(  # invariant 3
    runtime: ServiceRuntime,
) -> None:
    tool = WriteTool()
    registry = ToolRegistry()
    registry.register(tool)
    ledger = CallLedger(runtime.redis, runtime.settings.topic_prefix)
    survivor = ToolWorker(runtime.bus, registry, "worker-b", ledger)
    call = _write_call()
    # worker-a claimed the call and died before publishing: what SIGKILL leaves behind.
    await ledger.claim(call, "worker-a")
    async with ToolCallClient(runtime.settings.topic_prefix) as client:
        await survivor.handle(call)  # the redelivery
        await client.wait_for([call.data.call_id], timeout_s=60)
        await survivor.handle(call)  # a further redelivery after the report: nothing sent
    [result] = client.results[call.data.call_id]
    assert tool.runs == 0
    assert not result["success"] and "outcome unknown" in result["error"]


async def test_first_delivery_of_a_write_call_runs_once(runtime: ServiceRuntime) -> None:
    tool = WriteTool()
    registry = ToolRegistry()
    registry.register(tool)
    worker = ToolWorker(
        runtime.bus, registry, "worker-a", CallLedger(runtime.redis, runtime.settings.topic_prefix)
    )
    call = _write_call()
    async with ToolCallClient(runtime.settings.topic_prefix) as client:
        await worker.handle(call)
        await worker.handle(call)  # duplicate delivery after success
        await client.wait_for([call.data.call_id], timeout_s=60)
    assert tool.runs == 1
    assert [r["success"] for r in client.results[call.data.call_id]] == [True]
