"""The ``weft`` command line end to end, on the admin stack (an operator token is set) and
the real Kafka, PostgreSQL and Redis (docs/cli.md): a tenant and a key made through
``weft admin``, a file ingested with progress, a turn chatted (and stopped with Ctrl-C), a
dead letter replayed (and a second replay dropped as a duplicate), lag read, and partitions
added on a topic set of the test's own prefix. Each Kafka command logs in as its own
principal, so the broker's ACLs are in force."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from typer.testing import CliRunner
from weft_cli.app import app
from weft_cli.outcome import ExitCode
from weft_contracts import (
    AgentConfig,
    ChatRequested,
    ChatRequestedData,
    DeadLetter,
    DeadLetterData,
    Topic,
)
from weft_platform.kafka_acls import DLQ_REPLAY, OPS_LAG, OPS_TOPICS, create_acls
from weft_platform.settings import KafkaAccess
from weft_platform.topics import delete_topics
from weft_testkit import LocalStack, infra_env
from weft_testkit.credentials import signed
from weft_testkit.kafka import client_options, principal_env, settings_fields

from tests.security.admin_fixtures import OPERATOR_TOKEN

AGENT = "builtin-smart-reasoning"
RUNNER = CliRunner()
FACT = "Visitors park on level minus two; the barrier code is 4417."


@dataclass(frozen=True)
class Cli:
    """The stack, and a tenant and key made through ``weft admin``."""

    stack: LocalStack
    tenant: str
    key: dict[str, Any]

    def env(self, principal: str | None = None, **extra: str) -> dict[str, str]:
        """What ``weft`` reads: the gateway, the credentials, the prefix, and the Kafka
        login of ``principal`` (none: the test's super user settings are left out)."""
        kafka = principal_env(infra_env(), principal) if principal else {}
        return {
            "WEFT_API_URL": self.stack.gateway_url,
            "WEFT_API_KEY": str(self.key["secret"]),
            "WEFT_ADMIN_TOKEN": OPERATOR_TOKEN,
            "WEFT_TOPIC_PREFIX": self.stack.prefix,
            **{k: v for k, v in kafka.items() if k.startswith("WEFT_KAFKA_")},
            **extra,
        }

    def run(self, *args: str, principal: str | None = None, expect: int = 0,
            **extra: str) -> Any:  # fmt: skip
        """``weft args`` in process; its exit code must be ``expect``."""
        result = RUNNER.invoke(app, list(args), env=self.env(principal, **extra))
        assert result.exit_code == expect, (args, result.stdout[-3000:], result.stderr[-3000:])
        assert "Traceback" not in result.stderr
        return result

    def json(self, *args: str, principal: str | None = None, **extra: str) -> Any:
        """``weft args --json``, parsed."""
        result = RUNNER.invoke(app, [*args, "--json"], env=self.env(principal, **extra))
        assert result.exit_code == 0, (args, result.stdout[-3000:], result.stderr[-3000:])
        return json.loads(result.stdout)


def _weft(env: dict[str, str], *args: str, expect: int = 0) -> Any:
    result = RUNNER.invoke(app, list(args), env=env)
    assert result.exit_code == expect, (args, result.stdout[-2000:], result.stderr[-2000:])
    return result


@pytest.fixture(scope="module")
def cli(admin_stack_process: LocalStack) -> Cli:
    """A tenant and a key of it, made with ``weft admin`` (the key's secret is shown once)."""
    tenant = f"t-cli-{secrets.token_hex(4)}"
    env = {"WEFT_API_URL": admin_stack_process.gateway_url, "WEFT_ADMIN_TOKEN": OPERATOR_TOKEN}
    made = json.loads(_weft(env, "admin", "tenants", "create", tenant, "--json").stdout)
    assert made["id"] == tenant and made["status"] == "active"
    created = _weft(env, "admin", "keys", "create", tenant, "--user", "u1", "--json")
    key = json.loads(created.stdout)
    assert key["secret"] and key["tenant_id"] == tenant
    httpx.post(f"{admin_stack_process.llm_url}/_reset", timeout=30).raise_for_status()
    return Cli(admin_stack_process, tenant, key)


def test_admin_lists_the_key_without_its_secret_and_audits_its_creation(cli: Cli) -> None:
    keys = cli.json("admin", "keys", "ls", cli.tenant)
    assert [k["id"] for k in keys] == [cli.key["id"]]
    assert "secret" not in keys[0]
    audit = cli.json("admin", "audit", "--action", "key.create", "--target", cli.tenant)
    assert audit and audit[0]["outcome"] == "ok" and audit[0]["detail"]["key_id"] == cli.key["id"]
    cli.run("admin", "budget", "set", cli.tenant, "--per-minute", "900000", "--per-day", "0")
    assert cli.json("admin", "budget", "show", cli.tenant) == {
        "tokens_per_minute": 900000,
        "tokens_per_day": 0,
    }
    listed = cli.json("admin", "tenants", "ls", "--limit", "500")
    assert cli.tenant in {t["id"] for t in listed}


def test_a_file_is_ingested_with_progress_then_a_turn_uses_it(cli: Cli, tmp_path: Path) -> None:
    kb_id = cli.json("kb", "create", "cli-docs")["id"]
    doc = tmp_path / "parking.md"
    doc.write_text(f"# Parking\n\n{FACT}\n")
    (ingested,) = cli.json("kb", "ingest", kb_id, str(doc), "--timeout", "120")
    assert ingested["status"] == "ready" and ingested["chunk_count"] >= 1, ingested
    assert ingested["progress"][-1] == ["ready", ingested["chunk_count"], ingested["chunk_count"]]
    listed = cli.json("kb", "ls", kb_id)
    assert [d["title"] for d in listed] == ["parking.md"]

    # the turn as a person sees it: thoughts, the tool call, the answer as Markdown
    shown = cli.run("chat", "What is the parking barrier code?", "--agent", AGENT, "--kb", kb_id)
    assert "→ search_knowledge" in shown.stdout and "4417" in shown.stdout
    assert "completed ·" in shown.stdout
    # and as JSON lines: every event once, ending with complete
    lines = cli.run("chat", "What is the parking barrier code?", "--agent", AGENT, "--kb", kb_id,
                    "--json").stdout.splitlines()  # fmt: skip
    events = [json.loads(line) for line in lines]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "turn_started" and kinds[-1] == "complete"
    assert {"thought", "tool_call", "tool_result", "final_answer"} <= set(kinds)
    assert len({e["id"] for e in events if e["event"] != "complete"}) == len(events) - 1
    assert "4417" in events[-1]["data"]["data"]["final_answer"]


def test_ctrl_c_stops_the_turn_through_the_api(cli: Cli) -> None:
    words = " ".join(f"w{i}" for i in range(300))
    httpx.post(f"{cli.stack.llm_url}/_script", timeout=30, json={
        "steps": [{"match": "CLISTOP", "content": words, "chunk_delay_ms": 100}],
        "fallback": "demo",
    }).raise_for_status()  # fmt: skip
    args = [sys.executable, "-m", "weft_cli", "chat", "CLISTOP now", "--agent", AGENT, "--json"]
    process = subprocess.Popen(
        args, env={**os.environ, **cli.env()}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        events = []
        for line in process.stdout:
            events.append(json.loads(line))
            if events[-1]["event"] == "final_answer":  # mid-answer
                process.send_signal(signal.SIGINT)
                break
        events += [json.loads(line) for line in process.stdout]
        code = process.wait(timeout=60)
    finally:
        process.kill()
    stderr = process.stderr.read() if process.stderr else ""
    assert code == ExitCode.INTERRUPTED, stderr
    assert "stopping the turn" in stderr
    assert events[-1]["event"] == "complete"
    assert events[-1]["data"]["data"]["status"] == "cancelled"
    answered = sum(1 for e in events if e["event"] == "final_answer")
    assert answered < 150, "the answer kept streaming after the stop"


class CuttingProxy:
    """A TCP proxy to the gateway that drops the first chat connection once the answer
    has begun to stream (what a load balancer's restart or a network blip does)."""

    def __init__(self, upstream: int):
        self.upstream = upstream
        self.port = 0
        self.cuts = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CuttingProxy:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)

        async def upward() -> None:
            while data := await reader.read(65536):
                up_writer.write(data)
                await up_writer.drain()

        async def downward() -> bool:
            """Whether this connection was cut (a keep-alive connection carries the
            session's creation first, then the chat's stream)."""
            while data := await up_reader.read(65536):
                writer.write(data)
                await writer.drain()
                if self.cuts == 0 and b"event: final_answer" in data:
                    self.cuts = 1
                    return True
            return False

        pump = asyncio.ensure_future(upward())
        try:
            cut = await downward()
        finally:
            pump.cancel()
        for w in (writer, up_writer):
            w.transport.abort() if cut else w.close()


def test_a_dropped_connection_is_resumed_with_last_event_id(cli: Cli) -> None:
    """Invariant 1 through the command line: the stream is cut mid-answer, the CLI
    rejoins after the last event it saw, and shows every event once, in order."""
    words = " ".join(f"d{i}" for i in range(40))
    httpx.post(f"{cli.stack.llm_url}/_script", timeout=30, json={
        "steps": [{"match": "CLIDROP", "content": words, "chunk_delay_ms": 40}],
        "fallback": "demo",
    }).raise_for_status()  # fmt: skip
    gateway_port = int(cli.stack.gateway_url.rsplit(":", 1)[1])
    with CuttingProxy(gateway_port) as proxy:
        result = RUNNER.invoke(
            app, ["chat", "CLIDROP now", "--agent", AGENT, "--json"],
            env=cli.env(WEFT_API_URL=f"http://127.0.0.1:{proxy.port}"),
        )  # fmt: skip
    assert proxy.cuts == 1
    assert result.exit_code == 0, (result.stdout[-2000:], result.stderr[-2000:])
    assert "connection lost" in result.stderr and "resuming after" in result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    positions = [tuple(map(int, e["id"].split("-"))) for e in events]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    answer = "".join(e["data"]["data"]["delta"] for e in events if e["event"] == "final_answer")
    assert answer == events[-1]["data"]["data"]["final_answer"] == words
    assert [e["event"] for e in events].count("complete") == 1


@pytest.mark.parametrize(("mode", "outcome"), [("approve", "approved"), ("deny", "denied")])
def test_approval_prompts_are_answered_as_the_flag_says(cli: Cli, mode: str, outcome: str) -> None:
    """SPEC H-01..H-03 from the command line: a write of a ``confirm`` agent waits for a
    person; ``--approvals`` answers through the public API without asking."""
    headers = {"Authorization": f"Bearer {cli.key['secret']}"}
    with httpx.Client(base_url=cli.stack.gateway_url, headers=headers, timeout=60) as api:
        agent = api.post("/api/v1/agents", json={
            "name": f"cli-{mode}-{secrets.token_hex(3)}", "allowed_tools": ["write_sandbox_file"],
            "sandbox_enabled": True, "kb_selection_mode": "none", "access_level": "confirm",
        })  # fmt: skip
        assert agent.status_code == 201, agent.text
        session = api.post("/api/v1/sessions", json={"agent_id": agent.json()["id"]}).json()
    marker = f"CLIASK{mode.upper()}"
    write = {"path": "output/cli.txt", "content": "written after a decision"}
    steps = [{"match": marker, "tool_calls": [{"id": "w1", "name": "write_sandbox_file",
                                               "arguments": write}]},
             {"match": marker, "content": "done"}]  # fmt: skip
    httpx.post(f"{cli.stack.llm_url}/_script", json={"steps": steps}, timeout=30)
    result = cli.run("chat", f"{marker} please", "--session", session["id"], "--approvals", mode,
                     "--json")  # fmt: skip
    events = [json.loads(line) for line in result.stdout.splitlines()]
    data = {e["event"]: e["data"]["data"] for e in events}
    assert data["tool_approval_required"]["tool_name"] == "write_sandbox_file"
    assert data["tool_approval_resolved"]["outcome"] == outcome
    assert data["tool_approval_resolved"]["decided_by"] == "u1"
    assert data["tool_result"]["success"] is (mode == "approve"), data["tool_result"]
    assert data["complete"]["status"] == "completed"
    assert f"{outcome} prompt {data['tool_approval_required']['prompt_id']}" in result.stderr


async def _publish_dead_letter(stack: LocalStack, tenant: str, session_id: str) -> ChatRequested:
    """A turn's ChatRequested that its consumer dead-lettered (as the bus writes it)."""
    request_id = f"req_{secrets.token_hex(8)}"
    data = ChatRequestedData(query=f"DLQREPLAY {request_id}", user_id="u1",
                             agent=AgentConfig(agent_id=AGENT, model="scripted"))  # fmt: skip
    message = ChatRequested(tenant_id=tenant, session_id=session_id, request_id=request_id,
                            data=data)  # fmt: skip
    message = signed(stack.credentials, message, user_id="u1")
    letter = DeadLetter(
        tenant_id=tenant, session_id=session_id, request_id=request_id,
        data=DeadLetterData(
            source_topic=Topic.AGENT_REQUESTS.value, partition=0, offset=0,
            consumer_group="weft-engine", reason="handler_failed: RuntimeError: test",
            error_type="RuntimeError", key=session_id, raw=message.model_dump_json(),
        ),
    )  # fmt: skip
    producer = AIOKafkaProducer(**client_options(infra_env()))
    await producer.start()
    try:
        await producer.send_and_wait(
            stack.prefix + Topic.DLQ.value,
            letter.model_dump_json().encode(),
            key=session_id.encode(),
        )
    finally:
        await producer.stop()
    return message


async def _turn_events(stack: LocalStack, request_id: str, until: str | None) -> list[str]:
    """The types of one turn's events on agent.events, read from the start: up to its
    ``until`` event, or (None) every one there is now."""
    topic = stack.prefix + Topic.AGENT_EVENTS.value
    consumer = AIOKafkaConsumer(topic, **client_options(infra_env()), group_id=None,
                                auto_offset_reset="earliest")  # fmt: skip
    await consumer.start()
    kinds: list[str] = []
    ends: dict[Any, int] = {}
    try:
        async with asyncio.timeout(90):
            while True:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    for record in records:
                        value = json.loads(record.value)
                        if value.get("request_id") == request_id:
                            kinds.append(value["type"])
                            if value["type"] == until:
                                return kinds
                assigned = list(consumer.assignment())
                if until is None and assigned:
                    ends = ends or await consumer.end_offsets(assigned)
                    behind = [tp for tp in assigned if await consumer.position(tp) < ends[tp]]
                    if not behind:
                        return kinds
    finally:
        await consumer.stop()


def _wait_for_log(path: Path, *needles: str, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in path.read_text(errors="replace").splitlines():
            if all(n in line for n in needles):
                return line
        time.sleep(0.2)
    raise AssertionError(f"no log line with {needles} in {path}")


def test_a_dead_letter_is_replayed_once_and_a_second_replay_is_a_duplicate(cli: Cli) -> None:
    """ARCHITECTURE invariant 3: the replayed record keeps its id, time and credential, so
    the engine runs the turn once and drops the second replay as a redelivery."""
    headers = {"Authorization": f"Bearer {cli.key['secret']}"}
    session = httpx.post(f"{cli.stack.gateway_url}/api/v1/sessions", headers=headers,
                         json={"agent_id": AGENT}, timeout=30).json()  # fmt: skip
    message = asyncio.run(_publish_dead_letter(cli.stack, cli.tenant, session["id"]))

    letters = cli.json("dlq", "ls", "--limit", "1000", principal=DLQ_REPLAY)
    (row,) = [r for r in letters if r["session_id"] == session["id"]]
    assert row["replayable"] and row["source_topic"] == Topic.AGENT_REQUESTS.value
    shown = cli.json("dlq", "show", row["id"], principal=DLQ_REPLAY)
    assert shown["record"]["id"] == message.id and shown["record"]["credential"]

    (first,) = cli.json("dlq", "replay", row["id"], principal=DLQ_REPLAY)
    assert first == {"id": row["id"], "status": "replayed", "topic": Topic.AGENT_REQUESTS.value,
                     "envelope_id": message.id, "reason": None}  # fmt: skip
    kinds = asyncio.run(_turn_events(cli.stack, message.request_id, until="complete"))
    assert kinds[0] == "turn_started" and kinds.count("complete") == 1

    cli.run("dlq", "replay", row["id"], principal=DLQ_REPLAY)  # by position works as well
    engine_log = cli.stack.log_path("engine", cli.stack.ports["engine"][0])
    _wait_for_log(engine_log, "duplicate_skipped", message.id)
    again = asyncio.run(_turn_events(cli.stack, message.request_id, until=None))
    assert again.count("turn_started") == 1, "the second replay ran the turn again"


def test_lag_is_read_as_the_describe_only_principal(cli: Cli) -> None:
    requests = cli.stack.prefix + Topic.AGENT_REQUESTS.value
    deadline = time.monotonic() + 60
    while True:  # commits are coalesced: the engine's may be a moment behind
        report = cli.json("lag", "--group", "weft-engine", principal=OPS_LAG)
        rows = [r for r in report["partitions"] if r["topic"] == requests]
        if rows and sum(r["committed"] for r in rows) >= 1:
            break
        assert time.monotonic() < deadline, report
        time.sleep(0.5)
    for row in rows:
        assert row["lag"] == row["end"] - row["committed"] >= 0
    assert report["total_by_group"]["weft-engine"] >= 0
    # the same login cannot read a dead letter's record, nor add partitions
    cli.run("dlq", "ls", principal=OPS_LAG, expect=ExitCode.AUTH)
    cli.run("topics", "add-partitions", "dlq", "--to", "9", "--yes", principal=OPS_LAG,
            expect=ExitCode.AUTH)  # fmt: skip


@pytest.fixture
def own_prefix(infra: dict[str, str]) -> Iterator[str]:
    """A topic prefix of this test's own, with the ACLs of the table on it (the super
    user's part) and no topics: ``weft topics ensure`` creates them."""
    prefix = f"tcli{secrets.token_hex(4)}."
    access = KafkaAccess(**settings_fields(infra_env()))  # type: ignore[arg-type]

    async def acls() -> None:
        admin = AIOKafkaAdminClient(**access.client_options())
        await admin.start()
        try:
            await create_acls(admin, prefix)
        finally:
            await admin.close()

    asyncio.run(acls())
    try:
        yield prefix
    finally:
        asyncio.run(delete_topics(access, prefix))


def test_topics_are_ensured_and_partitions_added_only_with_yes(cli: Cli, own_prefix: str) -> None:
    made = cli.json("topics", "ensure", principal=OPS_TOPICS, WEFT_TOPIC_PREFIX=own_prefix,
                    WEFT_TOPIC_PARTITIONS="1")  # fmt: skip
    assert {t["action"] for t in made} == {"created"} and len(made) == len(Topic)
    again = cli.json("topics", "ensure", principal=OPS_TOPICS, WEFT_TOPIC_PREFIX=own_prefix)
    assert {t["action"] for t in again} == {"exists"}

    refused = cli.run(
        "topics",
        "add-partitions",
        "agent.requests",
        "--to",
        "3",
        principal=OPS_TOPICS,
        WEFT_TOPIC_PREFIX=own_prefix,
        expect=ExitCode.USAGE,
    )
    assert "drain first" in " ".join(refused.stderr.split())

    def partitions() -> int:
        rows = cli.json("topics", "ls", principal=OPS_TOPICS, WEFT_TOPIC_PREFIX=own_prefix)
        return int(next(r for r in rows if r["topic"].endswith("agent.requests.v1"))["partitions"])

    assert partitions() == 1, "refused means nothing changed"
    done = cli.json("topics", "add-partitions", "agent.requests", "--to", "3", "--yes",
                    principal=OPS_TOPICS, WEFT_TOPIC_PREFIX=own_prefix)  # fmt: skip
    assert (done["partitions_before"], done["partitions"]) == (1, 3)
    assert partitions() == 3
    fewer = cli.run(
        "topics",
        "add-partitions",
        "agent.requests",
        "--to",
        "2",
        "--yes",
        principal=OPS_TOPICS,
        WEFT_TOPIC_PREFIX=own_prefix,
        expect=ExitCode.FAILED,
    )
    assert "can only add partitions" in fewer.stderr
    # weft-ops-topics reads no consumer group
    cli.run("lag", principal=OPS_TOPICS, WEFT_TOPIC_PREFIX=own_prefix, expect=ExitCode.AUTH)
