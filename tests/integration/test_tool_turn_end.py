"""Turn-end cleanup reaches every tool-exec worker (SPEC T-04, T-12) over the real Kafka.

Two worker processes share the tool-call group, so one turn's data_schema calls load the
dataset into both workers' DuckDB. The engine's ``complete`` on ``agent.events`` is heard
by each worker (a group-less, broadcast consumer), and both drop the session's tables;
what each process holds is read from its ``/internal/state``.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_contracts import CompleteData, CompleteEvent, Topic, TurnStatus
from weft_platform.runtime import ServiceRuntime
from weft_storage.knowledge.ingest import IngestionQueue
from weft_storage.knowledge.store import KnowledgeStore
from weft_testkit.credentials import DevCredentials, signed
from weft_testkit.tool_workers import ToolCallClient, ToolWorkerPool

from tests.integration.kafka_helpers import service_runtime

LOG_DIR = Path(".weft/logs/e2e")
SALES_CSV = b"Region,Qty\nNorth,3\nSouth,10\nNorth,1\n"


@pytest.fixture
def pool(migrated: str) -> Iterator[ToolWorkerPool]:
    workers = ToolWorkerPool(LOG_DIR, extra_env={"WEFT_TOOL_CONCURRENCY": "1"}, knowledge=True)
    yield workers
    workers.stop()


@pytest.fixture
async def engine_bus(pool: ToolWorkerPool, infra: dict[str, str]) -> AsyncIterator[ServiceRuntime]:
    """Publishes on the pool's topics the way the engine does (EventBus, type header)."""
    async with service_runtime(infra, "engine-stand-in", prefix=pool.prefix, start=True) as rt:
        yield rt


async def _csv_document(sessions: async_sessionmaker[AsyncSession], tenant: str) -> str:
    kb_id = await KnowledgeStore(sessions).create_knowledge_base(tenant, "data")
    return await IngestionQueue(sessions).enqueue_file(
        tenant, kb_id, title="sales", file_name="sales.csv", content=SALES_CSV
    )


async def _state(port: int) -> dict[str, Any]:
    headers = DevCredentials.load().operator_headers("tool-exec", "tool-exec:state")
    async with httpx.AsyncClient(timeout=10, headers=headers) as http:
        state: dict[str, Any] = (await http.get(f"http://127.0.0.1:{port}/internal/state")).json()
    return state


async def _wait_until_dropped(port: int, session: str, cleaned: int = 0) -> dict[str, Any]:
    """The worker's state once the session's tables are gone and at least ``cleaned``
    turn-end cleanups have finished (a cleanup is counted after every tool's part of it,
    and the completes of two sessions may sit on different partitions, in any order)."""
    async with asyncio.timeout(60):
        while True:
            state = await _state(port)
            if (
                session not in state["duckdb_tables_by_session"]
                and state["turns_cleaned"] >= cleaned
            ):
                return state
            await asyncio.sleep(0.2)


async def test_complete_drops_the_turns_tables_on_every_worker(  # SPEC T-04, T-12
    pool: ToolWorkerPool,
    engine_bus: ServiceRuntime,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    tenant, session = f"t-{secrets.token_hex(4)}", f"s-{secrets.token_hex(4)}"
    doc_id = await _csv_document(sessions, tenant)
    await asyncio.to_thread(pool.start, "worker-a")
    await asyncio.to_thread(pool.start, "worker-b")
    ports = {name: port for name, (port, _) in pool.procs.items()}

    async with ToolCallClient(pool.prefix) as client:
        # Calls are keyed by call id: keep calling until both workers loaded the dataset.
        used: set[str] = set()
        for _ in range(40):
            call_id = await client.send(
                "data_schema", {"knowledge_id": doc_id}, tenant=tenant, session=session
            )
            await client.wait_for([call_id], timeout_s=60)
            result = client.results[call_id][0]
            assert result["success"], result
            used.add(result["worker"])
            if used == set(ports):
                break
    assert used == set(ports)
    for port in ports.values():
        assert (await _state(port))["duckdb_tables_by_session"] == {session: 1}

    other = f"s-{secrets.token_hex(4)}"  # a turn of another session: nothing of ours dropped
    for session_id in (other, session):
        complete = CompleteEvent(
            tenant_id=tenant, session_id=session_id, request_id=f"r-{session_id}",
            data=CompleteData(status=TurnStatus.COMPLETED, final_answer="done"),
        )  # fmt: skip
        # Signed as the engine's records are: the workers skip an unsigned complete.
        await engine_bus.bus.publish(Topic.AGENT_EVENTS, signed(DevCredentials.load(), complete))
    for port in ports.values():
        state = await _wait_until_dropped(port, session, cleaned=2)
        assert state["duckdb_tables_by_session"] == {}
