"""Fair shares between tenants (invariants 5 and 6), as a hostile tenant would test them.

- Starvation: tenant B floods tool-exec with slow calls (web_fetch of a page that does not
  answer until the test lets it); tenant C's call still runs and reports within its
  deadline while every one of B's calls is still held, and B never holds more than its
  cap of calls across the two workers (real Kafka, Redis, two tool-exec processes).
- Turns: tenant B opens more slow turns than the engines' step slots across two engine
  replicas; tenant C's turn completes while none of B's has, B never holds more than its
  turn cap, and every one of B's turns completes (the ones over the cap wait, none lost).
- One replica's step slots: B's turns, more than the one engine's slots and within B's turn
  cap, leave a slot to C (B's steps over its share of the replica are deferred).
- The spreadsheet bomb: a ~2 MB xlsx of 400,000 rows is refused with a document error that
  names the bound, while another tenant's document ingests (real PostgreSQL).
- Bounds refused early: a zip member that inflates past the limit, a PDF over its pages.
"""

from __future__ import annotations

import asyncio
import io
import json
import secrets
import threading
import zipfile
from collections.abc import Iterator
from contextlib import AsyncExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from weft_gateway.auth import ApiKeyAuth, Principal
from weft_gateway.knowledge_api import knowledge_router
from weft_gateway.knowledge_client import KnowledgeClient as GatewayKnowledge
from weft_gateway.knowledge_scope import KnowledgeScope
from weft_knowledge.api import knowledge_router as service_router
from weft_knowledge.ingestion import DocumentIngestor
from weft_knowledge.ingestion_loop import IngestionLoop
from weft_knowledge.search import KnowledgeSearch
from weft_knowledge.titles import KnowledgeDirectory
from weft_knowledge.usage import DocumentUsage
from weft_storage.knowledge.documents import DocumentReader
from weft_storage.knowledge.graph import GraphStore
from weft_storage.knowledge.ingest import INGESTION_CHANNEL, IngestionQueue
from weft_storage.knowledge.store import KnowledgeStore
from weft_storage.listen import ChannelWakeups
from weft_testkit import LocalStack, SseEvent, StackConfig, chat_requests, read_turn
from weft_testkit.tool_workers import ToolCallClient, ToolWorkerPool
from weft_tools.document_parsing import extract_text
from weft_tools.ingestion_limits import DocumentTooLarge, IngestionLimits

from tests.stack_fixtures import ApiKeys, KeyedClient

LOG_DIR = Path(".weft/logs/e2e")
THINK = {"thought": "t", "next_thought_needed": False, "thought_number": 1, "total_thoughts": 1}
TENANT_CAP = 2
FLOOD = 12  # spread over both workers' partitions but for a 1/2048 chance


class _Held(BaseHTTPRequestHandler):
    """A page that answers only when the test releases it; counts the requests."""

    arrived = 0
    lock = threading.Lock()
    release = threading.Event()

    def do_GET(self) -> None:
        with _Held.lock:
            _Held.arrived += 1
        _Held.release.wait(timeout=120)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"slow page body")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def held_page() -> Iterator[str]:
    _Held.arrived = 0
    _Held.release = threading.Event()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Held)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/page"
    _Held.release.set()
    httpd.shutdown()


@pytest.fixture
def pool(infra: dict[str, str]) -> Iterator[ToolWorkerPool]:
    workers = ToolWorkerPool(
        LOG_DIR,
        partitions=4,
        extra_env={
            "WEFT_TOOL_CONCURRENCY": "2",
            "WEFT_TOOL_TENANT_MAX_INFLIGHT": str(TENANT_CAP),
            "WEFT_WEB_FETCH_ALLOW_LOOPBACK": "true",
        },
    )
    yield workers
    workers.stop()


async def _arrived_at_least(count: int, timeout_s: float) -> bool:
    for _ in range(int(timeout_s * 10)):
        if _Held.arrived >= count:
            return True
        await asyncio.sleep(0.1)
    return _Held.arrived >= count


async def test_a_flooding_tenant_cannot_starve_another_tenants_tool_call(
    pool: ToolWorkerPool, held_page: str
) -> None:
    await asyncio.to_thread(pool.start, "worker-a")
    await asyncio.to_thread(pool.start, "worker-b")
    async with ToolCallClient(pool.prefix) as client:
        fetch = {"items": [{"url": held_page}]}
        flood = await client.send_many([("web_fetch", fetch, None)] * FLOOD, tenant="tenant-b")
        assert await _arrived_at_least(TENANT_CAP, 60), "B's first calls never started"
        # Four runners in all: B holds its cap of them, one on each worker (a tenant never
        # takes a worker's last runner), and waits for its pages; C's call, whichever
        # worker reads it, finds a free runner.
        quiet = await client.send("thinking", THINK, tenant="tenant-c", deadline_s=60)
        await client.wait_for([quiet], timeout_s=60)
        result = client.results[quiet][0]
        assert result["success"], result
        assert not any(c in client.results for c in flood), "B's pages were never released"
        assert _Held.arrived == TENANT_CAP, "B ran past its cap across the workers"
        _Held.release.set()
        await client.wait_for(flood, timeout_s=120)
    assert all(client.results[c][0]["success"] for c in flood)


def _spreadsheet(rows: int) -> bytes:
    """An xlsx of one sheet, one numeric column, written directly (openpyxl would take
    most of a minute for 400,000 rows)."""
    ns = "http://schemas.openxmlformats.org"
    content_types = (
        f'<Types xmlns="{ns}/package/2006/content-types">'
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
        'relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>'
        '<Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-'
        'officedocument.spreadsheetml.sheet.main+xml"/><Override PartName="/xl/worksheets/'
        'sheet1.xml" ContentType="application/vnd.openxmlformats-officedocument.'
        'spreadsheetml.worksheet+xml"/></Types>'
    )
    relation = f"{ns}/officeDocument/2006/relationships"
    root_rels = (
        f'<Relationships xmlns="{ns}/package/2006/relationships"><Relationship Id="rId1" '
        f'Type="{relation}/officeDocument" Target="xl/workbook.xml"/></Relationships>'
    )
    book = (
        f'<workbook xmlns="{ns}/spreadsheetml/2006/main" xmlns:r="{relation}"><sheets>'
        '<sheet name="rows" sheetId="1" r:id="rId1"/></sheets></workbook>'
    )
    book_rels = (
        f'<Relationships xmlns="{ns}/package/2006/relationships"><Relationship Id="rId1" '
        f'Type="{relation}/worksheet" Target="worksheets/sheet1.xml"/></Relationships>'
    )
    body = "".join(f'<row r="{i}"><c><v>{i % 997}</v></c></row>' for i in range(2, rows + 2))
    sheet = (
        f'<worksheet xmlns="{ns}/spreadsheetml/2006/main"><sheetData><row r="1"><c t="inlineStr">'
        f"<is><t>amount</t></is></c></row>{body}</sheetData></worksheet>"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", content_types)
        archive.writestr("_rels/.rels", root_rels)
        archive.writestr("xl/workbook.xml", book)
        archive.writestr("xl/_rels/workbook.xml.rels", book_rels)
        archive.writestr("xl/worksheets/sheet1.xml", sheet)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def bomb() -> bytes:
    content = _spreadsheet(400_000)
    assert 1_000_000 < len(content) < 4_000_000  # "a ~2 MB spreadsheet"
    return content


@pytest.fixture(scope="module")
def migrated(own_database: str) -> str:
    """The ``engine`` and ``sessions`` of this module are on its own database: it drives
    the ingestion queue itself (``own_database``)."""
    return own_database


@pytest.fixture
async def queue(sessions: async_sessionmaker[AsyncSession]) -> IngestionQueue:
    return IngestionQueue(sessions)


async def _status(reader: DocumentReader, tenant: str, kb: str, doc: str) -> tuple[str, str]:
    info = await reader.document(tenant, [kb], doc)
    assert info is not None
    return info.status, str(info.error or "")


async def test_the_spreadsheet_bomb_is_refused_and_other_tenants_ingest(
    sessions: async_sessionmaker[AsyncSession], queue: IngestionQueue, bomb: bytes
) -> None:
    store, reader = KnowledgeStore(sessions), DocumentReader(sessions)
    tenant_b, tenant_c = f"b-{secrets.token_hex(4)}", f"c-{secrets.token_hex(4)}"
    kb_b = await store.create_knowledge_base(tenant_b, "uploads")
    kb_c = await store.create_knowledge_base(tenant_c, "uploads")
    big = await queue.enqueue_file(tenant_b, kb_b, title="big", file_name="big.xlsx", content=bomb)
    small = await queue.enqueue_file(
        tenant_c, kb_c, title="staff", file_name="staff.csv", content=b"Name,Team\nAda,Core\n"
    )
    loop = IngestionLoop(DocumentIngestor(queue, None), poll_s=0.1, concurrency=2)
    await loop.start()
    try:
        for _ in range(600):
            states = [await _status(reader, tenant_b, kb_b, big),
                      await _status(reader, tenant_c, kb_c, small)]  # fmt: skip
            if all(status in ("ready", "failed") for status, _ in states):
                break
            await asyncio.sleep(0.1)
    finally:
        await loop.stop()
    (big_status, big_error), (small_status, small_error) = states
    assert big_status == "failed"
    assert "more than 100,000 rows" in big_error and "big.xlsx" in big_error
    assert small_status == "ready", small_error
    assert (await reader.document(tenant_b, [kb_b], big)).chunk_count == 0  # type: ignore[union-attr]


def test_a_zip_member_that_inflates_past_the_limit_is_refused_unread() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("xl/worksheets/sheet1.xml", b"\0" * (8 * 1024 * 1024))
    limits = IngestionLimits(max_decompressed_bytes=4 * 1024 * 1024)
    with pytest.raises(DocumentTooLarge, match=r"decompresses to 8\.0 MB"):
        extract_text("bomb.xlsx", buffer.getvalue(), limits)
    with pytest.raises(DocumentTooLarge, match="zip bomb"):
        extract_text("bomb.xlsx", buffer.getvalue(), IngestionLimits())


def test_a_pdf_over_its_page_limit_is_refused_before_extraction() -> None:
    from pypdf import PdfWriter

    writer = PdfWriter()
    for _ in range(5):
        writer.add_blank_page(width=72, height=72)
    buffer = io.BytesIO()
    writer.write(buffer)
    with pytest.raises(DocumentTooLarge, match="5 pages, over the limit of 3"):
        extract_text("long.pdf", buffer.getvalue(), IngestionLimits(max_pages=3))


async def test_a_tenant_over_its_chunk_total_is_refused_and_keeps_what_it_has(
    sessions: async_sessionmaker[AsyncSession], queue: IngestionQueue
) -> None:
    store, reader = KnowledgeStore(sessions), DocumentReader(sessions)
    tenant = f"t-{secrets.token_hex(4)}"
    kb = await store.create_knowledge_base(tenant, "uploads")
    limits = IngestionLimits(tenant_max_chunks=3)
    ingestor = DocumentIngestor(queue, None, limits=limits)
    first = await queue.enqueue_file(tenant, kb, title="a", file_name="a.txt", content=b"alpha")
    await _drain(ingestor)
    text = ("A paragraph about refunds and the rules for annual plans. " * 40 + "\n\n") * 12
    second = await queue.enqueue_file(
        tenant, kb, title="b", file_name="b.txt", content=text.encode()
    )
    await _drain(ingestor)
    assert (await _status(reader, tenant, kb, first))[0] == "ready"
    status, error = await _status(reader, tenant, kb, second)
    assert status == "failed" and "over its limit of 3" in error, error


async def _drain(ingestor: DocumentIngestor) -> None:
    while await ingestor.ingest_next():
        pass


# -- Engine: the per-tenant turn cap across replicas ------------------------------------

TURN_CAP = 2
TURN_SLOTS = 3
"""Step slots per engine: above the cap, so B's capped turns leave one on every engine
(with the share per replica lifted, a cap at a replica's slots lets B fill the replica
that C's session lands on: C's request then waits in its handler for B's to end)."""
TURN_FLOOD = 8
SLOW_PIECES = 24
SLOW_CHUNK_MS = 300
"""Each of B's turns streams its answer for about 7 s, holding a step slot meanwhile (C's
turn, a second at most, must end while the first of them still streams)."""


@pytest.fixture(scope="module")
def capped_stack(infra: dict[str, str]) -> Iterator[LocalStack]:
    """Two engines of three step slots each (six in all), tenants capped at two turns."""
    config = StackConfig(
        log_dir=LOG_DIR.parent / "e2e-turn-cap",
        replicas={"engine": 2},
        extra_env={
            "WEFT_MAX_INFLIGHT_TURNS": str(TURN_SLOTS),
            "WEFT_TURN_TENANT_MAX_INFLIGHT": str(TURN_CAP),
            # The cap across replicas alone: the share of one replica has its own test.
            "WEFT_TURN_TENANT_MAX_LOCAL": "0",
        },
    )
    with LocalStack(config) as running:
        yield running


async def _chat_session(client: KeyedClient) -> str:
    body = {"name": "fair", "kb_selection_mode": "none", "allowed_tools": []}
    agent = await client.http.post("/api/v1/agents", json=body)
    assert agent.status_code == 201, agent.text
    session = await client.http.post("/api/v1/sessions", json={"agent_id": agent.json()["id"]})
    assert session.status_code == 201, session.text
    return str(session.json()["id"])


async def _flood_and_quiet(
    keys: ApiKeys,
    llm: httpx.AsyncClient,
    tenants: tuple[str, str],
    tags: tuple[str, str],
    slow: list[str],
    flood: int,
) -> tuple[KeyedClient, KeyedClient, list[str], str]:
    """Tenant B's and C's clients, B's ``flood`` sessions and C's one, with the model
    scripted to stream B's answers (queries tagged ``tags[0]``) slowly and to answer C's
    (``tags[1]``) at once."""
    flooder, quiet = await keys.client(tenant=tenants[0]), await keys.client(tenant=tenants[1])
    steps = [{"match": tags[0], "content": slow, "chunk_delay_ms": SLOW_CHUNK_MS}] * flood
    steps.append({"match": tags[1], "content": "quick answer"})
    script = await llm.post("/_script", json={"steps": steps, "fallback": "demo"})
    assert script.status_code == 200, script.text
    b_sessions = [await _chat_session(flooder) for _ in range(flood)]
    return flooder, quiet, b_sessions, await _chat_session(quiet)


async def _chat(client: KeyedClient, session_id: str, query: str) -> list[SseEvent]:
    return await read_turn(
        client.http, f"/api/v1/agent-chat/{session_id}", api_key=client.key,
        json_body={"query": query}, timeout_s=240,
    )  # fmt: skip


@pytest.mark.kafka
async def test_a_tenant_flooding_turns_cannot_starve_another_tenants_turn(
    capped_stack: LocalStack, infra: dict[str, str]
) -> None:
    """B opens eight slow turns against six step slots in all; C's turn completes while
    none of B's has, B never holds more than its cap of turns, and B's turns all complete."""
    slow = [f"piece{i} " for i in range(SLOW_PIECES)]
    engine = create_async_engine(infra["WEFT_DATABASE_URL"])
    redis = Redis.from_url(infra["WEFT_REDIS_URL"])
    tenant_b, tenant_c = f"flood-{secrets.token_hex(4)}", f"quiet-{secrets.token_hex(4)}"
    slots_key = f"weft:slots:{capped_stack.prefix}engine:turns:{tenant_b}"
    held: list[int] = []

    async def watch_slots() -> None:
        while True:
            held.append(int(await redis.zcard(slots_key)))
            await asyncio.sleep(0.2)

    try:
        async with (
            AsyncExitStack() as clients,
            httpx.AsyncClient(base_url=capped_stack.llm_url, timeout=30) as llm,
        ):
            keys = ApiKeys(capped_stack, ApiKeyAuth(async_sessionmaker(engine)), clients)
            flooder, quiet, b_sessions, c_session = await _flood_and_quiet(
                keys, llm, (tenant_b, tenant_c), ("FLOODB", "QUIETC"), slow, TURN_FLOOD
            )

            watcher = asyncio.create_task(watch_slots())
            flood = [
                asyncio.create_task(_chat(flooder, sid, f"FLOODB {i}"))
                for i, sid in enumerate(b_sessions)
            ]
            for _ in range(600):  # B's first turns reach the model
                asked = [r for r in await chat_requests(llm) if "FLOODB" in json.dumps(r)]
                if len(asked) >= TURN_CAP:
                    break
                await asyncio.sleep(0.1)
            assert len(asked) >= TURN_CAP, "B's turns never reached the model"

            c_events = await _chat(quiet, c_session, "QUIETC please")
            c_done = c_events[-1].data["data"]
            assert c_done["status"] == "completed", c_done
            assert c_done["final_answer"] == "quick answer"
            assert not any(t.done() for t in flood), "C's turn waited for B's turns to end"

            b_done = [events[-1].data["data"] for events in await asyncio.gather(*flood)]
            assert [d["status"] for d in b_done] == ["completed"] * TURN_FLOOD, b_done
            watcher.cancel()
            assert max(held) <= TURN_CAP, f"B held {max(held)} turn slots"
            assert max(held) == TURN_CAP, "B's turns took no slots"
            for _ in range(100):  # every end gave its slot back
                if not await redis.zcard(slots_key):
                    break
                await asyncio.sleep(0.1)
            assert await redis.zcard(slots_key) == 0
    finally:
        await redis.aclose()
        await engine.dispose()


SHARE_FLOOD = 3
SHARE_PIECES = 20
"""Each of B's turns streams for about 6 s; one replica runs them one after another."""


@pytest.fixture(scope="module")
def one_engine_stack(infra: dict[str, str]) -> Iterator[LocalStack]:
    """One engine of two step slots, the turn cap above them: only the replica's share
    (all but one slot, by default) keeps a slot for another tenant."""
    config = StackConfig(
        log_dir=LOG_DIR.parent / "e2e-step-share",
        replicas={"engine": 1},
        extra_env={"WEFT_MAX_INFLIGHT_TURNS": "2", "WEFT_TURN_TENANT_MAX_INFLIGHT": "8"},
    )
    with LocalStack(config) as running:
        yield running


@pytest.mark.kafka
async def test_a_tenant_filling_one_replicas_step_slots_leaves_one_to_another_tenant(
    one_engine_stack: LocalStack, infra: dict[str, str]
) -> None:
    """B opens three slow turns, more than the replica's two step slots and within its
    turn cap; C's turn completes while none of B's has (B's steps over its share are
    deferred, not waited for in the handler that reads C's request), and every one of
    B's turns completes."""
    stack = one_engine_stack
    slow = [f"piece{i} " for i in range(SHARE_PIECES)]
    engine = create_async_engine(infra["WEFT_DATABASE_URL"])
    try:
        async with (
            AsyncExitStack() as clients,
            httpx.AsyncClient(base_url=stack.llm_url, timeout=30) as llm,
        ):
            keys = ApiKeys(stack, ApiKeyAuth(async_sessionmaker(engine)), clients)
            tenants = (f"flood-{secrets.token_hex(4)}", f"quiet-{secrets.token_hex(4)}")
            flooder, quiet, b_sessions, c_session = await _flood_and_quiet(
                keys, llm, tenants, ("SHAREB", "SHAREC"), slow, SHARE_FLOOD
            )

            flood = [
                asyncio.create_task(_chat(flooder, sid, f"SHAREB {i}"))
                for i, sid in enumerate(b_sessions)
            ]
            for _ in range(300):  # B's first turn streams
                asked = [r for r in await chat_requests(llm) if "SHAREB" in json.dumps(r)]
                if asked:
                    break
                await asyncio.sleep(0.1)
            assert asked, "B's turns never reached the model"
            await asyncio.sleep(1)  # B's other turns open and meet the replica's share

            c_events = await _chat(quiet, c_session, "SHAREC please")
            c_done = c_events[-1].data["data"]
            assert c_done["status"] == "completed", c_done
            assert not any(t.done() for t in flood), "C's turn waited for B's turns to end"

            b_done = [events[-1].data["data"] for events in await asyncio.gather(*flood)]
            assert [d["status"] for d in b_done] == ["completed"] * SHARE_FLOOD, b_done
    finally:
        await engine.dispose()


# -- Ingestion: a text posted as JSON takes the same fair queue ------------------------


def knowledge_service(
    store: KnowledgeStore,
    reader: DocumentReader,
    queue: IngestionQueue,
    sessions: async_sessionmaker[AsyncSession],
) -> GatewayKnowledge:
    """The gateway's client of a knowledge service running in process (memory, which
    meters the documents, answers yes)."""
    usage = DocumentUsage(
        "http://memory", lambda: "", transport=httpx.MockTransport(lambda _: httpx.Response(204))
    )
    service = FastAPI()
    service.include_router(
        service_router(
            store, reader, queue, KnowledgeSearch(store, reader), usage,
            KnowledgeDirectory(sessions), GraphStore(sessions), document_wait_s=10,
        )
    )  # fmt: skip
    transport = httpx.ASGITransport(app=service)
    return GatewayKnowledge("http://knowledge", "knowledge", 30, transport=transport)


class _Caller:
    """The principal the overridden auth returns (tenant switches between requests)."""

    def __init__(self) -> None:
        self.who = Principal(tenant_id="", user_id="u1")


async def test_a_text_posted_as_json_waits_for_its_tenants_share_not_in_the_gateway(
    engine: AsyncEngine, sessions: async_sessionmaker[AsyncSession], queue: IngestionQueue
) -> None:
    """B already has its one document in ingestion (the cap), so B's posted text is queued
    behind it (202 ``pending``); C's text, posted next, is ingested at once by a worker
    woken by the queue's notification (its poll is 60 s) and answered 201 ``ready``,
    searchable; B's follows once its first document is done. The JSON route used to chunk
    the text in the gateway, outside every tenant's share."""
    store, reader = KnowledgeStore(sessions), DocumentReader(sessions)
    tenant_b, tenant_c = f"b-{secrets.token_hex(4)}", f"c-{secrets.token_hex(4)}"
    kb_b = await store.create_knowledge_base(tenant_b, "docs")
    kb_c = await store.create_knowledge_base(tenant_c, "docs")
    await queue.enqueue_file(tenant_b, kb_b, title="first", file_name="a.txt", content=b"one")
    held = await queue.claim(tenant_max_inflight=1)  # B's first document, still "processing"
    assert held is not None and held.tenant_id == tenant_b

    auth, caller = ApiKeyAuth(sessions), _Caller()
    app = FastAPI()
    app.include_router(
        knowledge_router(
            gateway_knowledge := knowledge_service(store, reader, queue, sessions),
            auth,
            KnowledgeScope(gateway_knowledge, gateway_knowledge),
        )
    )
    app.dependency_overrides[auth] = lambda: caller.who
    wakeups = ChannelWakeups(engine, INGESTION_CHANNEL)
    loop = IngestionLoop(DocumentIngestor(queue, None), poll_s=60, wakeups=wakeups)
    body = {"title": "refunds", "content": "Refunds take five days."}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=30) as api:
        await loop.start()
        try:
            async with asyncio.timeout(30):
                await wakeups.listening.wait()
            caller.who = Principal(tenant_id=tenant_b, user_id="u1")
            queued = await api.post(f"{KBS}/{kb_b}/documents?wait_s=0", json=body)
            assert (queued.status_code, queued.json()["status"]) == (202, "pending"), queued.text
            b_doc = queued.json()["id"]

            caller.who = Principal(tenant_id=tenant_c, user_id="u1")
            added = await api.post(f"{KBS}/{kb_c}/documents", json=body)  # waits up to 10 s
            assert added.status_code == 201, added.text
            assert (added.json()["status"], added.json()["chunks"]) == ("ready", 1)
            hits = await store.keyword_search(tenant_c, [kb_c], "refunds")
            assert [h.document_id for h in hits] == [added.json()["id"]]
            assert (await _status(reader, tenant_b, kb_b, b_doc))[0] == "pending"

            await queue.finish(held.document_id)  # B's share frees (and wakes the workers)
            for _ in range(600):
                if (await _status(reader, tenant_b, kb_b, b_doc))[0] == "ready":
                    break
                await asyncio.sleep(0.05)
            assert (await _status(reader, tenant_b, kb_b, b_doc))[0] == "ready"
        finally:
            await loop.stop()


KBS = "/api/v1/knowledge-bases"


async def test_queuing_and_ending_a_document_wake_the_listening_workers(
    engine: AsyncEngine, sessions: async_sessionmaker[AsyncSession], queue: IngestionQueue
) -> None:
    """The notification that lets an idle worker claim at once rather than at its poll."""
    wakeups = ChannelWakeups(engine, INGESTION_CHANNEL)
    listener = asyncio.create_task(wakeups.run())
    try:
        async with asyncio.timeout(30):
            await wakeups.listening.wait()
        waiter = wakeups.waiter()
        tenant = f"w-{secrets.token_hex(4)}"
        kb = await KnowledgeStore(sessions).create_knowledge_base(tenant, "docs")
        seen = wakeups.notifications
        doc = await queue.enqueue_file(tenant, kb, title="t", file_name="t.txt", content=b"x")
        assert await waiter.wait(30), "queuing notifies"
        assert wakeups.notifications > seen
        seen = wakeups.notifications
        await queue.finish(doc)
        assert await waiter.wait(30), "ending one notifies"
        assert wakeups.notifications > seen
    finally:
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
