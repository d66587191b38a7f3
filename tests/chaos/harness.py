"""The fault suite's load: concurrent sessions of sequential turns, each read over SSE the
way a careful client reads it (resume with ``Last-Event-ID`` after any break, send again
only a request the gateway never accepted), and the checks every fault must pass.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_sse import aconnect_sse

RETRY_PAUSE_S = 0.5


@dataclass
class TurnRecord:
    """What one client saw of one turn."""

    session_id: str
    query: str
    request_id: str | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    """Envelopes of the turn, in arrival order, across reconnects."""
    reconnects: int = 0
    sends: int = 0
    """POSTs of the query (a refused one, 503 or no connection, is sent again)."""
    started_at: float = 0.0
    ended_at: float | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def completes(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == "complete"]

    @property
    def status(self) -> str | None:
        ends = self.completes
        return str(ends[-1]["data"]["status"]) if ends else None

    @property
    def error_codes(self) -> list[str]:
        return [str(e["data"].get("code")) for e in self.events if e["type"] == "error"]


@dataclass(frozen=True)
class LoadShape:
    sessions: int
    turns: int
    turn_timeout_s: float


class ChaosClient:
    """One careful SSE client per session."""

    def __init__(self, base_url: str, api_key: str):
        self._base_url = base_url
        self._headers = {"Authorization": f"Bearer {api_key}"}

    def _client(self) -> httpx.AsyncClient:
        timeout = httpx.Timeout(30.0, read=60.0)
        return httpx.AsyncClient(base_url=self._base_url, headers=self._headers, timeout=timeout)

    async def session(self, agent: str, deadline: float) -> str:
        while True:
            try:
                async with self._client() as http:
                    response = await http.post("/api/v1/sessions", json={"agent_id": agent})
                if response.status_code == 201:
                    return str(response.json()["id"])
                if response.status_code < 500:
                    raise AssertionError(f"session refused: {response.status_code} {response.text}")
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("no session could be created")
            await asyncio.sleep(RETRY_PAUSE_S)

    async def turn(self, record: TurnRecord, deadline: float) -> None:
        """Send the query, then follow the turn's events to its ``complete``, resuming
        after every break, until ``deadline`` (monotonic)."""
        record.started_at = time.monotonic()
        last_id: str | None = None
        accepted = False
        while time.monotonic() < deadline:
            try:
                # The gateway's keep-alives keep a read going: the deadline bounds it.
                async with asyncio.timeout(deadline - time.monotonic()):
                    async with self._client() as http:
                        if not accepted:
                            record.sends += 1
                            source_cm = aconnect_sse(
                                http, "POST", f"/api/v1/agent-chat/{record.session_id}",
                                json={"query": record.query},
                            )  # fmt: skip
                        else:
                            record.reconnects += 1
                            headers = {"Last-Event-ID": last_id} if last_id else {}
                            source_cm = aconnect_sse(
                                http, "GET", f"/api/v1/sessions/{record.session_id}/stream",
                                headers=headers,
                            )  # fmt: skip
                        async with source_cm as source:
                            status = source.response.status_code
                            # 5xx/429: the gateway or what it needs is down (a POST it refused
                            # was not sent on); 404 on a resume: the session's stream is not
                            # there (yet, or again after Redis lost it). Both are retried.
                            if status == 500:  # a dependency down must be a 503, never a 500
                                record.problems.append("HTTP 500")
                            if status >= 500 or status == 429 or (accepted and status == 404):
                                await source.response.aread()
                                await asyncio.sleep(RETRY_PAUSE_S)
                                continue
                            if status != 200:
                                body = (await source.response.aread()).decode(errors="replace")
                                record.problems.append(f"HTTP {status}: {body[:300]}")
                                return
                            if not accepted:
                                record.request_id = source.response.headers.get("x-request-id")
                            accepted = True
                            async for sse in source.aiter_sse():
                                if not sse.event or not sse.data:
                                    continue
                                envelope = json.loads(sse.data)
                                if envelope.get("request_id") != record.request_id:
                                    continue  # another turn of the session (a replayed one)
                                record.events.append(envelope)
                                last_id = sse.id or last_id
                                if sse.event == "complete":
                                    record.ended_at = time.monotonic()
                                    return
            except (httpx.TransportError, httpx.StreamError):
                pass
            except TimeoutError:
                break
            await asyncio.sleep(RETRY_PAUSE_S)
        record.problems.append(
            f"no complete before the deadline (request {record.request_id}, "
            f"{len(record.events)} events, accepted: {accepted})"
        )


async def run_load(
    client: ChaosClient, agent: str, shape: LoadShape, tag: str, records: list[TurnRecord]
) -> None:
    """``shape.sessions`` sessions at once, ``shape.turns`` turns each, one after another;
    each turn's record is appended to ``records`` as it starts (the caller watches them)."""

    async def one_session(index: int) -> None:
        start = time.monotonic()
        session_id = await client.session(agent, start + shape.turn_timeout_s)
        for turn in range(shape.turns):
            record = TurnRecord(session_id, f"{tag} session {index} turn {turn}")
            records.append(record)
            await client.turn(record, time.monotonic() + shape.turn_timeout_s)
            if record.ended_at is None:
                return  # the next turn would only wait on a busy session

    await asyncio.gather(*(one_session(i) for i in range(shape.sessions)))


def mid_answer(records: list[TurnRecord]) -> int:
    """Turns whose answer has started streaming and not ended."""
    return sum(
        1 for r in records
        if r.ended_at is None and any(e["type"] == "final_answer" for e in r.events)
    )  # fmt: skip


def stream_problems(record: TurnRecord) -> list[str]:
    """Invariant 1 and SPEC E-04 at the client: every event once, in ``seq`` order with
    no gap, exactly one ``complete``, last."""
    problems = list(record.problems)
    events = record.events
    if not events:
        return [*problems, "no event at all"]
    ids = [e["id"] for e in events]
    if len(set(ids)) != len(ids):
        dupes = [i for i, n in Counter(ids).items() if n > 1]
        problems.append(f"events received twice: {dupes[:3]}")
    seqs = [e.get("seq") for e in events]
    if None in seqs:
        problems.append("an event without seq (a synthetic ending?)")
    else:
        expected = list(range(1, len(seqs) + 1))
        if seqs != expected:
            problems.append(f"seq not 1..{len(seqs)} in order: {seqs}")
            trail = [f"{e['type']}:{e.get('seq')}:{str(e['id'])[-6:]}" for e in events]
            problems.append(f"events: {trail[:40]}")
    ends = [e["type"] for e in events].count("complete")
    if ends != 1:
        problems.append(f"{ends} complete events")
    elif events[-1]["type"] != "complete":
        problems.append("complete is not the last event")
    timeouts = [
        e for e in events
        if e["type"] == "tool_result" and "timed out" in str(e["data"].get("error") or "")
    ]  # fmt: skip
    if timeouts:
        problems.append(f"{len(timeouts)} fabricated tool timeouts")
    return problems


def storage_problems(record: TurnRecord, messages: list[dict[str, Any]]) -> list[str]:
    """Both rows of the turn stored, the assistant's no longer running, and a completed
    answer stored exactly as the stream's ``complete`` carried it."""
    mine = [m for m in messages if m.get("request_id") == record.request_id]
    roles = Counter(m["role"] for m in mine)
    problems = []
    if roles["user"] != 1:
        problems.append(f"{roles['user']} stored user messages")
    if roles["assistant"] != 1:
        problems.append(f"{roles['assistant']} stored assistant messages")
    user = next((m for m in mine if m["role"] == "user"), None)
    if user is not None and user["content"] != record.query:
        problems.append("stored user message differs from the query")
    assistant = next((m for m in mine if m["role"] == "assistant"), None)
    if assistant is not None:
        if assistant.get("status") == "running":
            problems.append("assistant message still running")
        completes = record.completes
        if completes and record.status == "completed":
            final = completes[-1]["data"].get("final_answer")
            if assistant["content"] != final:
                problems.append("stored answer differs from the streamed one")
    return problems


async def stored_messages(api: httpx.AsyncClient, session_id: str) -> list[dict[str, Any]]:
    response = await api.get(f"/api/v1/sessions/{session_id}/messages", params={"limit": 200})
    response.raise_for_status()
    messages: list[dict[str, Any]] = response.json()
    return messages


def summary(records: list[TurnRecord], fault_at: float) -> dict[str, Any]:
    """Outcomes and recovery times: seconds from the fault to the end of each turn that was
    running when it struck (turns started later only show that the stack works again)."""
    ended = [r for r in records if r.ended_at is not None]
    caught = [r for r in ended if r.started_at < fault_at < (r.ended_at or 0)]
    after = sorted((r.ended_at or 0) - fault_at for r in caught)
    return {
        "turns": len(records),
        "ended": len(ended),
        "statuses": dict(Counter(r.status or "none" for r in records)),
        "errors": dict(Counter(code for r in records for code in r.error_codes)),
        "reconnects": sum(r.reconnects for r in records),
        "resends": sum(r.sends - 1 for r in records if r.sends > 1),
        "caught_by_the_fault": len(caught),
        "max_end_after_fault_s": round(after[-1], 1) if after else None,
        "p50_end_after_fault_s": round(after[len(after) // 2], 1) if after else None,
        "last_turn_ended_after_fault_s": round(max((r.ended_at or 0) for r in ended) - fault_at, 1)
        if ended
        else None,
    }
