"""``search_knowledge`` p50/p99 as tool-exec runs it: before (the tool ran the search
pipeline in process against PostgreSQL) and after (the tool asks the knowledge service
over internal HTTP with the turn's credential). Issue 38 keeps the hop when it adds at
most 2 ms to p50 on a quiet machine.

One script for both trees: on a tree whose ``weft_tools.knowledge_search`` exists (before
the knowledge service) it measures the in-process tool ("direct"); otherwise it starts
``python -m weft_knowledge`` on a free port and measures the tool over HTTP ("http"), and
the same pipeline in process on this tree ("in-process", the hop isolated). To measure
"before", run it with the older tree's sources first on the path::

    git worktree add /tmp/weft-before <commit>
    PYTHONPATH=$(ls -d /tmp/weft-before/{libs,services}/*/src | paste -sd:) \\
        .venv/bin/python bench/knowledge_search.py

Loads ``--chunks`` synthetic chunks (keyword mode: the query embedding would add a model
call to both sides alike) into a fresh tenant, runs ``--queries`` searches after a
warm-up, prints p50/p99 (ms) with the load average and merges them into
``bench/results/knowledge_search.json``. Needs the local PostgreSQL and Redis (the service
connects to them; Kafka too, for its readiness).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import async_sessionmaker
from weft_contracts import ToolContext
from weft_storage.knowledge.store import KnowledgeStore
from weft_testkit import infra_env
from weft_testkit.kafka import principal_env
from weft_testkit.stack import free_port
from weft_tool_catalog import ToolInvocation
from weft_tools.aliases import MemoryAliasBook
from weft_tools.knowledge_scope import KnowledgeScope
from weft_tools.knowledge_tools import SearchKnowledgeTool

try:
    from weft_platform.runtime import database_engine
except ImportError:  # a tree from before it was named: the same pool, spelled out

    def database_engine(url: str) -> Any:
        from sqlalchemy.ext.asyncio import create_async_engine

        return create_async_engine(url, pool_size=5, max_overflow=5, pool_pre_ping=True)


sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import RESULTS, machine

WORDS = tuple(
    [
        "refund",
        "invoice",
        "security",
        "encryption",
        "backup",
        "region",
        "latency",
        "billing",
        "password",
        "account",
        "export",
        "import",
        "webhook",
        "quota",
        "storage",
        "support",
        "contract",
        "privacy",
        "audit",
        "retention",
        "upgrade",
        "migration",
        "cluster",
        "alert",
        "customer",
        "plan",
        "team",
        "service",
        "data",
        "request",
        "policy",
        "system",
    ]
)
QUERIES = ["refund policy", "invoice export", "encryption backup", "quota alert",
           "password account security", "contract retention audit"]  # fmt: skip


def ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


async def load(store: KnowledgeStore, tenant: str, chunks: int) -> str:
    """A KB of about ``chunks`` chunks (documents of 50 paragraphs of ~500 characters)."""
    kb = await store.create_knowledge_base(tenant, "bench")
    rng = random.Random(7)
    for d in range(max(1, chunks // 50)):
        paragraphs = [" ".join(rng.choice(WORDS) for _ in range(70)) + "." for _ in range(50)]
        await store.add_document(tenant, kb, f"doc {d}", "\n\n".join(paragraphs))
    return kb


def invocation(tenant: str, kb: str, query: str, credential: str | None) -> ToolInvocation:
    context = ToolContext(user_id="bench", agent_id="bench", knowledge_base_ids=[kb])
    return ToolInvocation(
        tenant_id=tenant, session_id="bench", request_id="bench",
        arguments={"query": query, "mode": "keyword", "limit": 5}, context=context,
        credential=credential,
    )  # fmt: skip


CPU: dict[str, float] = {}
"""CPU milliseconds this process spent per tool (``time.process_time``)."""


async def once(tool: Any, call: ToolInvocation, label: str = "") -> float:
    start, cpu = time.perf_counter(), time.process_time()
    outcome = await tool.run(call)
    elapsed = (time.perf_counter() - start) * 1000
    CPU[label] = CPU.get(label, 0.0) + (time.process_time() - cpu) * 1000
    assert outcome.success, outcome.error
    return elapsed


def process_cpu_ms(pid: int) -> float:
    """User + system CPU milliseconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


async def timed(tools: dict[str, tuple[Any, str | None]], tenant: str, kb: str, n: int
                ) -> dict[str, list[float]]:  # fmt: skip
    """``n`` searches per tool, interleaved query by query (the order alternating), so
    that a shared machine's load drifts over every tool alike."""
    for tool, credential in tools.values():  # warm-up: connections, plans, caches
        for query in QUERIES * 3:
            await once(tool, invocation(tenant, kb, query, credential))
    samples: dict[str, list[float]] = {label: [] for label in tools}
    order = list(tools)
    for i in range(n):
        for label in order if i % 2 == 0 else reversed(order):
            tool, credential = tools[label]
            call = invocation(tenant, kb, QUERIES[i % len(QUERIES)], credential)
            samples[label].append(await once(tool, call, label))
    return samples


def direct_tool(sessions: Any, scope: KnowledgeScope) -> tuple[str, Any] | None:
    """The tool as it ran before the knowledge service (None on a tree without it)."""
    try:
        from weft_tools.knowledge_search import KnowledgeSearch
    except ImportError:
        return None
    from weft_storage.knowledge.documents import DocumentReader

    store, reader = KnowledgeStore(sessions), DocumentReader(sessions)
    return "direct", SearchKnowledgeTool(KnowledgeSearch(store, reader), scope)


class _InProcess:
    """This tree's pipeline called in process, shaped as the tool's client."""

    def __init__(self, sessions: Any):
        from weft_knowledge.search import KnowledgeSearch
        from weft_storage.knowledge.documents import DocumentReader
        from weft_storage.knowledge.faq import FaqStore

        # Built as knowledge's app builds it (FAQ bases looked up too), so that the hop
        # is the only difference between the two arms.
        self._search = KnowledgeSearch(
            KnowledgeStore(sessions), DocumentReader(sessions), faq=FaqStore(sessions)
        )

    def credential_for(self, call: ToolInvocation) -> str | None:
        return call.credential

    async def search(
        self, tenant: str, kbs: list[str], query: str, mode: Any, limit: int,
        *, credential: str | None, **options: Any,
    ) -> Any:  # fmt: skip
        # The mention's and FAQ priority's options, passed on as the service passes them.
        given = {k: v for k, v in options.items() if v is not None}
        return await self._search.search(tenant, kbs, query, mode, limit, **given)


def start_service(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "weft_knowledge"], env=env, stdout=out,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("knowledge exited at start")
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("knowledge not ready in time")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=500)
    parser.add_argument("--queries", type=int, default=400)
    args = parser.parse_args()
    infra = infra_env()
    # The pool every service opens (weft_platform.runtime): the one tool-exec searched
    # through before the knowledge service, and the one knowledge searches through now,
    # so that a pool setting (its checkout ping) is not counted as the hop.
    engine = database_engine(infra["WEFT_DATABASE_URL"])
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    tenant = f"bench-{secrets.token_hex(4)}"
    kb = await load(KnowledgeStore(sessions), tenant, args.chunks)
    scope = KnowledgeScope(MemoryAliasBook())
    results: dict[str, list[float]] = {}
    before = direct_tool(sessions, scope)
    if before is not None:
        label, tool = before
        results = await timed({label: (tool, None)}, tenant, kb, args.queries)
    else:
        from weft_platform.credentials import ensure_dev_keys, load_signer
        from weft_platform.runtime import DEV_ISSUERS
        from weft_tools.knowledge_client import KnowledgeClient

        inprocess = SearchKnowledgeTool(_InProcess(sessions), scope)  # type: ignore[arg-type]
        keys = Path(tempfile.mkdtemp(prefix="weft-bench-keys-"))
        ensure_dev_keys(keys, DEV_ISSUERS)
        port = free_port()
        env = {
            **os.environ, **principal_env(infra, "weft-knowledge"), "WEFT_HTTP_PORT": str(port),
            "WEFT_METRICS_PORT": "0", "WEFT_CREDENTIALS_DIR": str(keys),
            "WEFT_CREDENTIALS_DEV_KEYS": "false", "WEFT_EMBEDDING_MODEL": "",
            "WEFT_LOG_LEVEL": "WARNING",
        }  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        process = start_service(env, port, keys / "knowledge.log")
        server_cpu = 0.0
        try:
            wait_ready(url, process)
            turn = load_signer(keys, "gateway").request(
                tenant_id=tenant, user_id="bench", session_id="bench", request_id="bench",
                audience=["knowledge"], ttl_s=3600,
            )  # fmt: skip
            client = KnowledgeClient(url)
            over_http = SearchKnowledgeTool(client, scope)
            tools = {"in-process": (inprocess, None), "http": (over_http, turn)}
            CPU.clear()
            server_before = process_cpu_ms(process.pid)
            results = await timed(tools, tenant, kb, args.queries)
            server_cpu = process_cpu_ms(process.pid) - server_before
            await client.aclose()
        finally:
            process.terminate()
            process.wait(timeout=30)
    await engine.dispose()
    report: dict[str, Any] = {
        label: {"p50_ms": ms(v, 0.5), "p99_ms": ms(v, 0.99), "n": len(v)}
        for label, v in results.items()
    }
    if {"http", "in-process"} <= set(results):  # the hop, pair by pair (same query, adjacent)
        hop = [h - p for h, p in zip(results["http"], results["in-process"], strict=True)]
        report["hop"] = {"p50_ms": ms(hop, 0.5), "n": len(hop)}
        # What a quiet machine would show: CPU on the call's path, not waits for a core.
        # CPU counts the measured calls only; the server's count also has the warm-up's
        # calls (it ran for nothing else but its idle loop).
        client_ms = (CPU["http"] - CPU["in-process"]) / len(hop)
        server_ms = server_cpu / (len(hop) + 3 * len(QUERIES))
        report["hop_cpu"] = {
            "client_ms_per_call": round(client_ms, 2),
            "server_ms_per_call": round(server_ms, 2),
            "total_ms_per_call": round(client_ms + server_ms, 2),
        }
    out = {"chunks": args.chunks, "mode": "keyword", **machine(), "results": report}
    print(json.dumps(out, indent=2))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "knowledge_search.json"
    saved = json.loads(path.read_text()) if path.is_file() else {}
    for label in report:
        saved[label] = {**out, "results": {label: report[label]}}
    path.write_text(json.dumps(saved, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
