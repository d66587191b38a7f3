"""A pool of tool-exec worker processes on their own topics, and a client that sends them
calls over the real Kafka (multi-worker tests of invariant 3 and the tool benchmarks).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from weft_contracts import ToolCallRequested, ToolCallRequestedData, ToolContext

from weft_testkit.credentials import DevCredentials, credentials_dir, signed
from weft_testkit.kafka import client_options, principal_env
from weft_testkit.stack import (
    Process,
    create_topics,
    delete_topics,
    free_port,
    infra_env,
    start_service,
    wait_ready,
)


class ToolWorkerPool:
    """``python -m weft_tool_exec`` processes sharing one consumer group."""

    def __init__(
        self,
        log_dir: Path,
        *,
        partitions: int = 6,
        extra_env: dict[str, str] | None = None,
        knowledge: bool = False,
    ):
        """``knowledge``: start a knowledge service too (at the first worker), which the
        workers' knowledge and data tools ask (``WEFT_KNOWLEDGE_URL``)."""
        self.prefix = f"tw{secrets.token_hex(4)}."
        self.log_dir = log_dir
        self.partitions = partitions
        self.extra_env = extra_env or {}
        self.procs: dict[str, tuple[int, Process]] = {}
        self._knowledge = knowledge
        self._knowledge_proc: Process | None = None
        log_dir.mkdir(parents=True, exist_ok=True)
        create_topics(self.prefix, partitions)

    def _start_knowledge(self) -> None:
        port = free_port()
        env = {
            **os.environ, **principal_env(infra_env(), "weft-knowledge"),
            "PYTHONUNBUFFERED": "1", "WEFT_HTTP_PORT": str(port), "WEFT_METRICS_PORT": "0",
            "WEFT_TOPIC_PREFIX": self.prefix, "WEFT_LOG_FORMAT": "json",
            "WEFT_EMBEDDING_MODEL": "", "WEFT_CREDENTIALS_DIR": str(credentials_dir()),
            **{k: v for k, v in self.extra_env.items() if k in ("WEFT_DATABASE_URL",)},
        }  # fmt: skip
        self._knowledge_proc = start_service(
            "weft_knowledge", [], env, self.log_dir / f"{self.prefix}knowledge.log"
        )
        wait_ready(self._knowledge_proc, port, 120, f"knowledge (log in {self.log_dir})")
        self.extra_env = {"WEFT_KNOWLEDGE_URL": f"http://127.0.0.1:{port}", **self.extra_env}

    def start(self, name: str) -> None:
        """Start worker ``name`` and wait for its /readyz."""
        if self._knowledge and self._knowledge_proc is None:
            self._start_knowledge()
        port = free_port()
        env = {
            **os.environ, **principal_env(infra_env(), "weft-tool-exec"),
            # No metrics port: by default it is the HTTP port + 1000, which nobody checked
            # was free (a worker died at start on "address already in use" in CI).
            "PYTHONUNBUFFERED": "1", "WEFT_HTTP_PORT": str(port), "WEFT_METRICS_PORT": "0",
            "WEFT_TOPIC_PREFIX": self.prefix, "WEFT_INSTANCE_ID": name, "WEFT_LOG_FORMAT": "json",
            "WEFT_EMBEDDING_MODEL": "", "WEFT_CREDENTIALS_DIR": str(credentials_dir()),
            **self.extra_env,
        }  # fmt: skip
        process = start_service(
            "weft_tool_exec", [], env, self.log_dir / f"{self.prefix}{name}.log"
        )
        self.procs[name] = (port, process)
        wait_ready(process, port, 120, f"worker {name} (log in {self.log_dir})")

    def kill(self, name: str) -> None:
        """SIGKILL one worker (a crash: no cleanup, no offset commit)."""
        _, process = self.procs.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM every worker, SIGKILL after 20 s; then delete the pool's topics."""
        processes = [process for _, process in self.procs.values()]
        if self._knowledge_proc is not None:
            processes.append(self._knowledge_proc)
            self._knowledge_proc = None
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        self.procs.clear()
        delete_topics(self.prefix)


class ToolCallClient:
    """Publishes ``ToolCallRequested`` like the engine and collects the results."""

    def __init__(
        self, prefix: str, credentials: DevCredentials | None = None, *, sandbox: bool = False
    ):
        """``credentials``: signers of the workers' key folder (default: this run's).
        ``sandbox``: publish on ``sandbox.calls``, keyed by session as the engine does,
        instead of ``tool.calls``."""
        self.prefix = prefix
        self._credentials = credentials or DevCredentials.load()
        self._topic = "weft.sandbox.calls.v1" if sandbox else "weft.tool.calls.v1"
        self._by_session = sandbox
        kafka = client_options(infra_env())
        self.results: dict[str, list[dict[str, Any]]] = {}
        self.arrived: dict[str, float] = {}
        """``time.perf_counter()`` when each call's first result arrived."""
        self._producer = AIOKafkaProducer(**kafka, acks="all")
        self._consumer = AIOKafkaConsumer(
            f"{prefix}weft.tool.results.v1", **kafka,
            group_id=f"{prefix}probe-{secrets.token_hex(3)}", auto_offset_reset="earliest",
        )  # fmt: skip
        self._reader: asyncio.Task[None] | None = None
        self._arrived = asyncio.Condition()

    async def __aenter__(self) -> ToolCallClient:
        await self._producer.start()
        await self._consumer.start()
        self._reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._reader:
            self._reader.cancel()
        await self._consumer.stop()
        await self._producer.stop()

    async def _read(self) -> None:
        async for record in self._consumer:
            data = json.loads(record.value)["data"]
            async with self._arrived:
                self.arrived.setdefault(data["call_id"], time.perf_counter())
                self.results.setdefault(data["call_id"], []).append(data)
                self._arrived.notify_all()

    async def send(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        tenant: str = "bench",
        session: str | None = None,
        deadline_s: float = 120,
        traceparent: str | None = None,
    ) -> str:
        """Publish one call (in its own session unless ``session`` is given); return its id."""
        [call_id] = await self.send_many(
            [(tool, arguments, session)], tenant=tenant, deadline_s=deadline_s,
            traceparent=traceparent,
        )  # fmt: skip
        return call_id

    async def send_many(
        self,
        calls: list[tuple[str, dict[str, Any], str | None]],
        *,
        tenant: str = "bench",
        deadline_s: float = 120,
        traceparent: str | None = None,
    ) -> list[str]:
        """Publish (tool, arguments, session) calls without waiting for each ack in turn
        (the producer batches them, as a busy engine's would); return their ids."""
        ids: list[str] = []
        pending = []
        for tool, arguments, session in calls:
            call_id = f"call_{secrets.token_hex(6)}"
            session_id = session or f"s-{call_id}"
            message = ToolCallRequested(
                tenant_id=tenant, session_id=session_id, request_id=f"r-{session_id}",
                traceparent=traceparent,
                data=ToolCallRequestedData(
                    call_id=call_id, tool_name=tool, arguments=arguments, round=0,
                    deadline=datetime.now(UTC) + timedelta(seconds=deadline_s),
                    context=ToolContext(user_id="u", agent_id="a", allowed_tools=[tool]),
                ),
            )  # fmt: skip
            message = signed(self._credentials, message, user_id="u")  # as the engine forwards
            topic = f"{self.prefix}{self._topic}"
            body = message.model_dump_json().encode()
            key = message.session_id.encode() if self._by_session else message.key()
            pending.append(await self._producer.send(topic, body, key=key))
            ids.append(call_id)
        await asyncio.gather(*pending)
        return ids

    async def wait_for(self, call_ids: list[str], timeout_s: float) -> None:
        """Wait until every call has at least one result."""
        async with asyncio.timeout(timeout_s), self._arrived:
            await self._arrived.wait_for(lambda: all(c in self.results for c in call_ids))
