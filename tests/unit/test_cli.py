"""The ``weft`` command line without a stack: exit codes, usage errors, how a turn is shown,
and the client side of chat (resume with Last-Event-ID, approvals answered once) over an
in-process HTTP double of the gateway (docs/cli.md)."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from rich.console import Console
from typer.testing import CliRunner
from weft_cli.app import app
from weft_cli.chat_turn import ChatRequest, chat, follow
from weft_cli.gateway import Gateway
from weft_cli.outcome import ExitCode, code_of_status
from weft_cli.topic_admin import REPARTITION_WARNING, resolve
from weft_cli.turn_view import TurnView

RUNNER = CliRunner()
NO_CREDENTIALS = {"WEFT_API_KEY": "", "WEFT_ADMIN_TOKEN": "", "WEFT_API_URL": "http://127.0.0.1:1"}


def _invoke(*args: str, env: dict[str, str] | None = None) -> Any:
    return RUNNER.invoke(app, list(args), env={**NO_CREDENTIALS, **(env or {})})


def test_http_answers_map_to_exit_codes() -> None:
    assert code_of_status(401) == code_of_status(403) == ExitCode.AUTH
    assert int(ExitCode.AUTH) == 3 and int(ExitCode.UNREACHABLE) == 4 and int(ExitCode.USAGE) == 2
    assert code_of_status(503) == code_of_status(500) == ExitCode.UNREACHABLE
    assert code_of_status(404) == code_of_status(409) == code_of_status(422) == ExitCode.FAILED


@pytest.mark.parametrize(
    "args",
    [
        ["chat"],  # neither a message nor --resume
        ["chat", "hi", "--resume", "--session", "s1"],
        ["chat", "--resume"],  # --resume without --session
        ["chat", "hi", "--approvals", "maybe"],
        ["chat", "hi", "--reconnects", "-1"],
        ["topics", "add-partitions", "agent.requests"],  # no --to
        ["topics", "add-partitions", "no.such.topic", "--to", "3", "--yes"],
        ["lag", "--group", "someone-elses-group"],
        ["dlq", "replay"],  # neither ids nor --all
        ["kb", "ingest", "kb1", "/no/such/file.md"],
        ["admin", "keys", "create", "t1"],  # no --user
        ["no-such-command"],
    ],
)
def test_bad_usage_exits_2_with_a_message(args: list[str]) -> None:
    result = _invoke(*args, env={"WEFT_API_KEY": "k"})
    assert result.exit_code == ExitCode.USAGE, (result.stdout, result.stderr)
    assert result.stderr.strip(), "a usage error says what is wrong"
    assert "Traceback" not in result.stderr + result.stdout


def test_adding_partitions_is_refused_without_yes_and_says_to_drain_first() -> None:
    """The warning is in the help and in the output, and nothing is sent to Kafka (the
    broker address here answers nothing)."""
    help_text = _invoke("topics", "add-partitions", "--help").stdout
    assert "drain first" in " ".join(help_text.split())
    result = _invoke(
        "topics", "add-partitions", "agent.requests", "--to", "12",
        env={"WEFT_KAFKA_BOOTSTRAP": "127.0.0.1:1"},
    )  # fmt: skip
    assert result.exit_code == ExitCode.USAGE
    assert " ".join(REPARTITION_WARNING.split()) in " ".join(result.stderr.split())
    assert "--yes" in result.stderr


def test_missing_credentials_are_an_auth_failure_before_any_request() -> None:
    for args in (["admin", "tenants", "ls"], ["kb", "ls"], ["chat", "hello"]):
        result = _invoke(*args)
        assert result.exit_code == ExitCode.AUTH, args
        assert "WEFT_ADMIN_TOKEN" in result.stderr or "WEFT_API_KEY" in result.stderr


def test_an_unreachable_gateway_exits_4() -> None:
    result = _invoke("kb", "ls", env={"WEFT_API_KEY": "k"})
    assert result.exit_code == ExitCode.UNREACHABLE
    assert "not reachable" in result.stderr and "Traceback" not in result.stderr


def test_sasl_without_a_password_is_a_usage_error() -> None:
    env = {"WEFT_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "WEFT_KAFKA_USERNAME": "weft-ops-lag",
           "WEFT_KAFKA_PASSWORD": ""}  # fmt: skip
    result = _invoke("lag", env=env)
    assert result.exit_code == ExitCode.USAGE and "WEFT_KAFKA_PASSWORD" in result.stderr


def test_topics_are_named_short_long_or_by_constant() -> None:
    assert (
        resolve("agent.requests") == resolve("weft.agent.requests.v1") == resolve("AGENT_REQUESTS")
    )


def _sse(position: str, kind: str, data: dict[str, Any]) -> bytes:
    envelope = {"type": kind, "session_id": "s1", "request_id": "r1", "data": data}
    return f"id: {position}\nevent: {kind}\ndata: {json.dumps(envelope)}\n\n".encode()


Event = tuple[str, str, dict[str, Any]]
TURN: list[Event] = [
    ("1-0", "turn_started", {"agent_id": "builtin-smart-reasoning"}),
    ("1-1", "thought", {"round": 0, "delta": "I should look it up."}),
    ("1-2", "tool_call", {"round": 0, "call_id": "c1", "tool_name": "knowledge_search",
                          "arguments": {"query": "parking"}}),
    ("1-3", "tool_result", {"round": 0, "call_id": "c1", "tool_name": "knowledge_search",
                            "success": True, "output": "barrier code 4417", "duration_ms": 12}),
    ("1-4", "final_answer", {"round": 1, "delta": "The code is **4417**."}),
    ("1-5", "complete", {"status": "completed", "final_answer": "The code is **4417**.",
                         "rounds": 2, "duration_ms": 80}),
]  # fmt: skip


class _Cut(httpx.AsyncByteStream):
    """The first ``keep`` events of the turn, then the connection drops."""

    def __init__(self, events: list[tuple[str, str, dict[str, Any]]], cut: bool):
        self._events, self._cut = events, cut

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for event in self._events:
            yield _sse(*event)
        if self._cut:
            raise httpx.ReadError("connection reset by peer")


def _gateway(handler: Callable[[httpx.Request], httpx.Response]) -> Gateway:
    transport = httpx.MockTransport(handler)
    return Gateway(httpx.AsyncClient(base_url="http://gw.test", transport=transport))


def _stream(events: list[tuple[str, str, dict[str, Any]]], cut: bool = False) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"},
                          stream=_Cut(events, cut))  # fmt: skip


async def test_a_cut_stream_is_resumed_after_the_last_event_each_event_once() -> None:
    """SPEC C-05 / invariant 1 from the client's side: the message is sent once, the
    resume names the last position seen, and no event is shown twice."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.method == "POST":
            return _stream(TURN[:3], cut=True)
        after = request.headers["last-event-id"]
        return _stream([e for e in TURN if e[0] > after])

    shown: list[str] = []

    async def on_event(position: str | None, kind: str, envelope: dict[str, Any]) -> None:
        shown.append(f"{position} {kind}")

    request = ChatRequest(query="parking?", session_id="s1", reconnects=2)
    complete = await follow(_gateway(handler), "s1", request, on_event)
    assert complete["data"]["status"] == "completed"
    assert shown == [f"{p} {k}" for p, k, _ in TURN]
    assert [r.method for r in seen] == ["POST", "GET"]
    assert seen[1].url.path == "/api/v1/sessions/s1/stream"
    assert seen[1].headers["last-event-id"] == "1-2"


async def test_a_stream_that_keeps_dropping_gives_up_with_the_resume_command() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return _stream(TURN[:1], cut=True)

    async def on_event(position: str | None, kind: str, envelope: dict[str, Any]) -> None:
        return None

    with pytest.raises(Exception) as failed:
        await follow(_gateway(handler), "s1", ChatRequest(query="q", reconnects=1), on_event)
    message = getattr(failed.value, "message", "")
    assert "weft chat --session s1 --resume --last-event-id 1-0" in message
    assert getattr(failed.value, "code", None) == ExitCode.UNREACHABLE


async def test_an_approval_prompt_is_answered_once_even_when_shown_again() -> None:
    prompt = {"prompt_id": "p1", "call_id": "c1", "tool_name": "write_sandbox_file",
              "arguments": {"path": "a.txt"}, "risk": "write"}  # fmt: skip
    decisions: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/agent/prompts/p1":
            decisions.append(json.loads(request.content))
            return httpx.Response(200, json={"status": "approved"})
        if request.method == "POST":
            return _stream([("2-0", "tool_approval_required", prompt)], cut=True)
        # the resume shows the pending prompt again before what follows it
        return _stream([("2-0", "tool_approval_required", prompt), TURN[-1]])

    request = ChatRequest(query="write it", session_id="s1", approvals="approve", as_json=True)
    code = await chat(_gateway(handler), request)
    assert code == ExitCode.OK
    assert decisions == [{"decision": "approve"}]


async def test_a_failed_turn_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    failed: list[Event] = [("3-0", "error", {"code": "llm_unavailable", "message": "model down"}),
              ("3-1", "complete", {"status": "failed"})]  # fmt: skip

    def handler(request: httpx.Request) -> httpx.Response:
        return _stream(failed)

    code = await chat(_gateway(handler), ChatRequest(query="q", session_id="s1"))
    assert code == ExitCode.FAILED
    assert "error llm_unavailable: model down" in capsys.readouterr().out


def test_a_turn_is_shown_with_its_tool_calls_and_the_answer_as_markdown() -> None:
    buffer = io.StringIO()
    view = TurnView(Console(file=buffer, width=100, force_terminal=False, color_system=None))
    for _, kind, data in TURN[:-1]:
        view.show(kind, {"type": kind, "data": data})
    view.finish({"type": "complete", "data": TURN[-1][2]})
    shown = buffer.getvalue()
    assert "thinking: I should look it up." in shown
    assert '→ knowledge_search {"query": "parking"}' in shown
    assert "✓ knowledge_search (12 ms) barrier code 4417" in shown
    assert "The code is 4417." in shown, "Markdown rendered: no asterisks left"
    assert "completed · 2 rounds · 80 ms" in shown


def test_a_superseded_answer_round_is_dropped() -> None:
    view = TurnView(Console(file=io.StringIO(), force_terminal=False))
    view.show("final_answer", {"data": {"round": 0, "delta": "draft"}})
    view.show("final_answer", {"data": {"round": 0, "delta": "", "superseded": True}})
    view.show("final_answer", {"data": {"round": 1, "delta": "final"}})
    assert view.answer == "final"


def test_an_unreachable_broker_exits_4() -> None:
    result = _invoke("lag", env={"WEFT_KAFKA_BOOTSTRAP": "127.0.0.1:1"})
    assert result.exit_code == ExitCode.UNREACHABLE, result.stderr
    assert "not reachable" in result.stderr and "Traceback" not in result.stderr
