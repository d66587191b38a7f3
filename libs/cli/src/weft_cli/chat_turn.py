"""``weft chat``: start a turn (or rejoin the running one), follow its Server-Sent Events to
the end, resume after a dropped connection, stop the turn on Ctrl-C, answer its approval
prompts.

The gateway ends every stream with ``complete`` (SPEC C-05). A stream that ends without it
was cut: the client asks ``GET /sessions/{id}/stream`` with ``Last-Event-ID`` (the last
position it saw) and gets what came after, each event once (invariant 1).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from httpx_sse import aconnect_sse
from rich.prompt import Confirm

from weft_cli.gateway import Gateway, refuse, unreachable
from weft_cli.outcome import CommandFailed, ExitCode
from weft_cli.output import err, out
from weft_cli.turn_view import TurnView, event_line

ApprovalMode = Literal["ask", "approve", "deny", "wait"]
OnEvent = Callable[[str | None, str, dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True, kw_only=True)
class ChatRequest:
    """What ``weft chat`` was asked (``query`` None: rejoin the session's running turn)."""

    query: str | None
    session_id: str | None = None
    agent_id: str | None = None
    knowledge_base_ids: list[str] = field(default_factory=list)
    approvals: ApprovalMode = "ask"
    as_json: bool = False
    reconnects: int = 5
    last_event_id: str | None = None


@dataclass
class _Stopper:
    """Ctrl-C once: ask the gateway to stop the turn and keep following it to its end;
    twice: give up at once."""

    gw: Gateway
    session_id: str
    requested: bool = False
    task: asyncio.Task[None] | None = None

    def on_interrupt(self, main: asyncio.Task[Any]) -> None:
        if self.requested:
            main.cancel()
            return
        self.requested = True
        err.print("[yellow]stopping the turn (Ctrl-C again to quit at once)…[/]")
        self.task = asyncio.get_running_loop().create_task(self._stop())

    async def _stop(self) -> None:
        try:
            await self.gw.call("POST", f"/api/v1/sessions/{self.session_id}/stop", "stop")
        except CommandFailed as exc:  # e.g. the turn ended meanwhile (409)
            err.print(f"[yellow]stop: {exc.message}[/]")


async def chat(gw: Gateway, request: ChatRequest) -> ExitCode:
    """Run the command; the exit code of how the turn ended."""
    session_id = request.session_id or await _new_session(gw, request.agent_id)
    if request.session_id is None:
        err.print(f"[dim]session {session_id}[/]")
    stopper = _Stopper(gw, session_id)
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    loop.add_signal_handler(signal.SIGINT, stopper.on_interrupt, main)
    view = TurnView(out)
    decided: set[str] = set()

    async def on_event(position: str | None, kind: str, envelope: dict[str, Any]) -> None:
        if request.as_json:
            out.file.write(event_line(position, kind, envelope) + "\n")
            out.file.flush()
        else:
            view.show(kind, envelope)
        if kind == "tool_approval_required":
            await _answer(gw, request.approvals, envelope.get("data") or {}, decided)

    try:
        complete = await follow(gw, session_id, request, on_event)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        if stopper.task is not None:
            await stopper.task
    if not request.as_json:
        view.finish(complete)
    status = (complete.get("data") or {}).get("status")
    if stopper.requested:
        return ExitCode.INTERRUPTED
    return ExitCode.OK if status == "completed" else ExitCode.FAILED


async def follow(
    gw: Gateway, session_id: str, request: ChatRequest, on_event: OnEvent
) -> dict[str, Any]:
    """Read the turn to its ``complete`` event (returned), resuming up to
    ``request.reconnects`` times in a row after a cut connection."""
    position = request.last_event_id
    started = request.query is None  # rejoining: nothing to send
    failures = 0
    # (position, type) of each event shown: a stream that hands an event again is not
    # shown it twice, and only a new event counts as progress. The type is part of it
    # because the gateway's synthetic error and complete reuse the last real position.
    shown: set[tuple[str, str]] = set()
    while True:
        if started:
            method, url = "GET", f"/api/v1/sessions/{session_id}/stream"
            headers = {"Last-Event-ID": position} if position else {}
            body = None
        else:
            method, url, headers = "POST", f"/api/v1/agent-chat/{session_id}", {}
            body = _chat_body(request)
        try:
            async with aconnect_sse(gw.http, method, url, json=body, headers=headers) as source:
                response = source.response
                if not response.is_success:
                    await response.aread()
                    raise refuse(response, "chat" if not started else "resume")
                started = True  # the turn exists: never send the query twice
                async for sse in source.aiter_sse():
                    if not sse.event or (sse.event == "message" and not sse.data):
                        continue
                    position = sse.id or position
                    if sse.id and (sse.id, sse.event) in shown:
                        continue
                    shown.add((sse.id, sse.event))
                    envelope = _envelope(sse.data)
                    failures = 0
                    await on_event(sse.id, sse.event, envelope)
                    if sse.event == "complete":
                        return dict(envelope)
        except httpx.TransportError as exc:
            if not started:
                raise unreachable(gw.http.base_url, exc) from exc
            reason = f"{type(exc).__name__}"
        else:
            reason = "the stream ended before the turn did"
        failures += 1
        if failures > request.reconnects:
            raise CommandFailed(
                f"lost the stream ({reason}) {failures} times in a row; rejoin with "
                f"`weft chat --session {session_id} --resume"
                + (f" --last-event-id {position}`" if position else "`"),
                ExitCode.UNREACHABLE,
            )
        err.print(
            f"[yellow]connection lost ({reason}); resuming after {position or 'the start'}[/]"
        )
        await asyncio.sleep(min(0.25 * 2**failures, 5.0))


def _envelope(data: str) -> dict[str, Any]:
    """One event's JSON envelope; anything else is the gateway's fault, said so."""
    try:
        envelope = json.loads(data)
    except ValueError:
        envelope = None
    if not isinstance(envelope, dict):
        raise CommandFailed(f"the gateway sent an event that is not a JSON object: {data[:200]!r}")
    return envelope


def _chat_body(request: ChatRequest) -> dict[str, Any]:
    body: dict[str, Any] = {"query": request.query}
    if request.agent_id:
        body["agent_id"] = request.agent_id
    if request.knowledge_base_ids:
        body["knowledge_base_ids"] = request.knowledge_base_ids
    return body


async def _new_session(gw: Gateway, agent_id: str | None) -> str:
    body = {"agent_id": agent_id} if agent_id else {}
    session = await gw.call("POST", "/api/v1/sessions", "create a session", json=body)
    return str(session["id"])


async def _answer(gw: Gateway, mode: ApprovalMode, data: dict[str, Any], decided: set[str]) -> None:
    """Decide one prompt as ``mode`` says (a prompt shown again on resume: once)."""
    prompt_id = str(data.get("prompt_id", ""))
    if not prompt_id or prompt_id in decided:
        return
    decision: str | None = None
    if mode in ("approve", "deny"):
        decision = mode
    elif mode == "ask" and sys.stdin.isatty():
        question = (
            f"Run {data.get('tool_name')} with {json.dumps(data.get('arguments', {}))[:300]}?"
        )
        decision = "approve" if await asyncio.to_thread(Confirm.ask, question) else "deny"
    if decision is None:
        err.print(
            f"[yellow]waiting for a decision on prompt {prompt_id} "
            f"(POST /api/v1/agent/prompts/{prompt_id}; or --approvals approve|deny)[/]"
        )
        return
    decided.add(prompt_id)
    await gw.call(
        "POST", f"/api/v1/agent/prompts/{prompt_id}", f"{decision} prompt {prompt_id}",
        json={"decision": decision},
    )  # fmt: skip
    done = "approved" if decision == "approve" else "denied"
    err.print(f"[dim]{done} prompt {prompt_id}[/]")
