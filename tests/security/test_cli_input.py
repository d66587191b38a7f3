"""Hostile input to the ``weft`` command line (docs/cli.md): dead letters that are forged,
cut, undecodable or aimed at a topic only its producer writes are shown and refused for
replay with the reason, never a traceback and never a record written; what the gateway,
the model or another tenant's data put on the screen cannot drive the terminal; a tenant
key is no operator credential (exit 3)."""

from __future__ import annotations

import asyncio
import io
import json
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition
from rich.console import Console
from typer.testing import CliRunner
from weft_cli.app import app
from weft_cli.chat_turn import ChatRequest, follow
from weft_cli.dead_letters import RAW_LIMIT, NotReplayable, read_letter, replay_of, summary
from weft_cli.gateway import Gateway
from weft_cli.outcome import CommandFailed, ExitCode
from weft_cli.turn_view import TurnView
from weft_contracts import (
    AgentConfig,
    CancelRequested,
    CancelRequestedData,
    ChatRequested,
    ChatRequestedData,
    DeadLetter,
    DeadLetterData,
    Topic,
)
from weft_platform.kafka_acls import DLQ_REPLAY
from weft_platform.settings import KafkaAccess
from weft_platform.topics import delete_topics, ensure_topics
from weft_testkit import LocalStack, infra_env
from weft_testkit.kafka import client_options, principal_env, settings_fields

from tests.security.admin_fixtures import OPERATOR_TOKEN

RUNNER = CliRunner()


def _request(tenant: str = "t1", session: str = "s1", credential: str | None = "jwt") -> str:
    data = ChatRequestedData(query="hi", user_id="u1", agent=AgentConfig(agent_id="a1", model="m"))
    message = ChatRequested(tenant_id=tenant, session_id=session, request_id="r1", data=data)
    return message.model_copy(update={"credential": credential}).model_dump_json()


def _letter(raw: str, source: str = Topic.AGENT_REQUESTS.value, **kw: Any) -> bytes:
    fields: dict[str, Any] = {"source_topic": source, "consumer_group": "weft-engine",
                              "reason": "handler_failed: x", "error_type": "RuntimeError",
                              "key": "s1", "raw": raw} | kw  # fmt: skip
    tenant = fields.pop("letter_tenant", "t1")
    letter = DeadLetter(tenant_id=tenant, session_id="s1", request_id="r1",
                        data=DeadLetterData(**fields))  # fmt: skip
    return letter.model_dump_json().encode()


HOSTILE: dict[str, tuple[bytes, str]] = {
    "undecodable record": (_letter("{not json"), "not a valid weft.agent.requests.v1"),
    "cut record": (_letter(_request()[:-1] + " " * RAW_LIMIT), "cannot be replayed whole"),
    "bytes replaced": (_letter(_request().replace("hi", "h\ufffd")), "not valid UTF-8"),
    "events are the engine's": (
        _letter(_request(), source=Topic.AGENT_EVENTS.value),
        "only its own producer",
    ),
    "unknown topic": (_letter(_request(), source="weft.secrets.v1"), "unknown source topic"),
    "no credential": (_letter(_request(credential=None)), "no credential"),
    "another tenant's record": (
        _letter(_request(tenant="victim"), letter_tenant="t1"),
        "forged or damaged",
    ),
    "forged key": (_letter(_request(), key="someone-elses-session"), "forged or damaged"),
    "wrong topic's model": (
        _letter(
            CancelRequested(
                tenant_id="t1",
                session_id="s1",
                request_id="r1",
                credential="jwt",
                data=CancelRequestedData(),
            ).model_dump_json(),
            source=Topic.TOOL_RESULTS.value,
        ),
        "not a valid weft.tool.results.v1",
    ),
    "newer schema": (
        _letter(_request().replace('"schema_version":1', '"schema_version":99')),
        "not a valid",
    ),
    "not a dead letter": (b"\xff\xfe garbage", "not a dead letter"),
    "dead letter of the future": (b'{"type":"dead_letter","schema_version":99}', "not a dead"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_dead_letter_is_listed_and_refused_with_its_reason(name: str) -> None:
    value, reason = HOSTILE[name]
    stored = read_letter(0, 7, 0, value)
    with pytest.raises(NotReplayable, match=None) as refused:
        replay_of(stored)
    assert reason in str(refused.value), str(refused.value)
    row = summary(stored)
    assert row["replayable"] is False and row["refusal"] == str(refused.value)
    assert row["position"] == "0:7"


def test_a_sound_dead_letter_goes_back_byte_for_byte() -> None:
    raw = _request()
    replay = replay_of(read_letter(0, 1, 0, _letter(raw)))
    assert replay.value == raw.encode() and replay.key == b"s1"
    assert replay.topic is Topic.AGENT_REQUESTS and replay.type == "chat_requested"


@pytest.fixture(scope="module")
def dlq_prefix(infra: dict[str, str]) -> Iterator[str]:
    """A prefix of this module's own: its topics and the table's ACLs (the super user's)."""
    prefix = f"tclisec{secrets.token_hex(4)}."
    access = KafkaAccess(**settings_fields(infra_env()))  # type: ignore[arg-type]
    asyncio.run(ensure_topics(access, {"WEFT_TOPIC_PARTITIONS": "1"}, prefix=prefix))
    try:
        yield prefix
    finally:
        asyncio.run(delete_topics(access, prefix))


async def _put(prefix: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(**client_options(infra_env()))
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(prefix + Topic.DLQ.value, value)
    finally:
        await producer.stop()


async def _ends(prefix: str) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(**client_options(infra_env()), group_id=None)
    await consumer.start()
    try:
        parts = [TopicPartition(prefix + t.value, 0) for t in Topic if t is not Topic.DLQ]
        ends: dict[TopicPartition, int] = await consumer.end_offsets(parts)
        return ends
    finally:
        await consumer.stop()


def test_hostile_dead_letters_on_the_broker_are_shown_and_never_replayed(dlq_prefix: str) -> None:
    asyncio.run(_put(dlq_prefix, [value for value, _ in HOSTILE.values()]))
    env = {"WEFT_TOPIC_PREFIX": dlq_prefix, **principal_env(infra_env(), DLQ_REPLAY)}
    before = asyncio.run(_ends(dlq_prefix))

    listed = RUNNER.invoke(app, ["dlq", "ls", "--json", "--limit", "100"], env=env)
    assert listed.exit_code == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert len(rows) == len(HOSTILE) and not any(r["replayable"] for r in rows)
    table = RUNNER.invoke(app, ["dlq", "ls"], env=env)  # the people's view of the same
    assert table.exit_code == 0 and "Traceback" not in table.stderr

    for row in rows:
        shown = RUNNER.invoke(app, ["dlq", "show", row["position"]], env=env)
        assert shown.exit_code == 0 and "Traceback" not in shown.stderr + shown.stdout
        replayed = RUNNER.invoke(app, ["dlq", "replay", row["position"], "--json"], env=env)
        assert replayed.exit_code == ExitCode.FAILED, replayed.stdout
        (outcome,) = json.loads(replayed.stdout)
        assert outcome["status"] == "refused" and outcome["reason"] == row["refusal"]
    every = RUNNER.invoke(app, ["dlq", "replay", "--all", "--json"], env=env)
    assert every.exit_code == 0
    assert {o["status"] for o in json.loads(every.stdout)} == {"skipped"}
    assert asyncio.run(_ends(dlq_prefix)) == before, "a refused letter was written somewhere"

    missing = RUNNER.invoke(app, ["dlq", "replay", "no-such-letter"], env=env)
    assert missing.exit_code == ExitCode.FAILED and "no dead letter" in missing.stderr


def test_a_tenant_key_is_no_operator_credential(admin_stack_process: LocalStack) -> None:
    stack = admin_stack_process
    env = {"WEFT_API_URL": stack.gateway_url, "WEFT_ADMIN_TOKEN": stack.api_key}
    refused = RUNNER.invoke(app, ["admin", "tenants", "ls"], env=env)
    assert refused.exit_code == ExitCode.AUTH
    assert "403" in refused.stderr and "tenant keys cannot administer" in refused.stderr
    bad_token = RUNNER.invoke(app, ["admin", "audit"], env={**env, "WEFT_ADMIN_TOKEN": "op-x"})
    assert bad_token.exit_code == ExitCode.AUTH
    # an operator's bad input: a clear 4xx, exit 1
    env["WEFT_ADMIN_TOKEN"] = OPERATOR_TOKEN
    bad_id = RUNNER.invoke(app, ["admin", "tenants", "create", "../../etc"], env=env)
    assert bad_id.exit_code == ExitCode.FAILED and "422" in bad_id.stderr
    missing = RUNNER.invoke(app, ["admin", "keys", "revoke", "no-tenant", "no-key"], env=env)
    assert missing.exit_code == ExitCode.FAILED and "Traceback" not in missing.stderr


def test_bad_public_api_input_is_a_clear_failure(admin_stack_process: LocalStack) -> None:
    stack = admin_stack_process
    env = {"WEFT_API_URL": stack.gateway_url, "WEFT_API_KEY": stack.api_key}
    huge = RUNNER.invoke(app, ["chat", "x" * 100_001, "--session", "s-none"], env=env)
    assert huge.exit_code == ExitCode.FAILED and "HTTP 4" in huge.stderr
    bad_position = RUNNER.invoke(
        app, ["chat", "--resume", "--session", "s1", "--last-event-id", "1-0; drop"], env=env
    )
    assert bad_position.exit_code == ExitCode.FAILED and "Traceback" not in bad_position.stderr
    revoked = RUNNER.invoke(app, ["kb", "ls"], env={**env, "WEFT_API_KEY": "wk_forged"})
    assert revoked.exit_code == ExitCode.AUTH


def test_a_non_json_event_is_a_clear_failure() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        body = b"id: 1-0\nevent: thought\ndata: <html>proxy error</html>\n\n"
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    gw = Gateway(
        httpx.AsyncClient(base_url="http://gw.test", transport=httpx.MockTransport(handler))
    )

    async def on_event(position: str | None, kind: str, envelope: dict[str, Any]) -> None:
        return None

    with pytest.raises(CommandFailed, match="not a JSON object"):
        asyncio.run(follow(gw, "s1", ChatRequest(query="q", session_id="s1"), on_event))


def test_what_the_model_says_cannot_drive_the_terminal() -> None:
    """An answer, a tool output or a tool name with escape sequences (retitle the window,
    clear the screen) or rich markup is shown as text."""
    buffer = io.StringIO()
    view = TurnView(Console(file=buffer, force_terminal=True, width=200))
    hostile = "\x1b]0;pwned\x07\x1b[2J[bold red]fake prompt[/]\x9b31m"
    view.show("thought", {"data": {"delta": hostile}})
    view.show("tool_result", {"data": {"tool_name": hostile, "success": True, "output": hostile}})
    view.show("error", {"data": {"code": hostile, "message": hostile}})
    view.finish({"data": {"status": "completed", "final_answer": hostile}})
    shown = buffer.getvalue()
    assert "pwned" in shown and "fake prompt" in shown, "the text itself stays"
    assert "\x1b]0;" not in shown and "\x1b[2J" not in shown and "\x9b" not in shown
    assert "[bold red]" in shown, "markup from data is printed, not applied"


def test_a_wrong_kafka_password_is_a_refused_login(dlq_prefix: str) -> None:
    env = {**principal_env(infra_env(), DLQ_REPLAY), "WEFT_KAFKA_PASSWORD": "guessed",
           "WEFT_TOPIC_PREFIX": dlq_prefix}  # fmt: skip
    refused = RUNNER.invoke(app, ["dlq", "ls"], env=env)
    assert refused.exit_code == ExitCode.AUTH, refused.stderr
    assert "refused the login" in refused.stderr and "guessed" not in refused.stderr
