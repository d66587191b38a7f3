"""What the engine needs from the memory service, as one small async client:
history under a token budget (SPEC M-08), checkpoints and token scale (M-07, M-02),
long-term memory recall and extraction (M-10)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import ValidationError
from weft_contracts import Grant
from weft_llm import CHAT_MESSAGES, ChatMessage
from weft_platform.internal_auth import bearer
from weft_platform.retry import RetryWindow, request_within
from weft_platform.tracing import propagation_hooks

from weft_engine.compaction import Checkpoint, CompactionResult
from weft_engine.state import TurnState


class MemoryUnavailable(Exception):
    """The memory service could not answer."""


class MalformedHistory(MemoryUnavailable):
    """Memory answered with a message that is not a chat message of the wire format; the
    turn cannot be built on it (its history is refused as a whole, not repaired)."""


@dataclass(frozen=True, kw_only=True)
class LoadedHistory:
    """History as memory rebuilt it; ``turn_ids`` aligns with ``messages``."""

    messages: list[ChatMessage]
    turn_ids: list[str | None]
    summary: str | None = None
    checkpoint_turn_id: str | None = None
    tokens: int = 0
    token_scale: float | None = None
    previous_turn_stored: bool | None = None
    """With ``after``: whether the previous turn's end was in memory in time."""

    def with_prefix(
        self, head: list[ChatMessage], tail: list[ChatMessage] | None = None
    ) -> tuple[list[ChatMessage], list[str | None]]:
        """``head`` (system) + history + ``tail`` (the new user message) and their turn ids,
        ready for :meth:`Compactor.compact`."""
        extra = tail or []
        messages = [*head, *self.messages, *extra]
        return messages, [None] * len(head) + self.turn_ids + [None] * len(extra)


@dataclass(frozen=True, kw_only=True)
class Recalled:
    """One long-term memory (``RecalledMemory`` fields)."""

    id: str
    content: str
    score: float = 0.0


@dataclass
class HistoryClient:
    """The engine's client of memory's ``/internal`` routes: the turn's history and its
    checkpoints, plus long-term memory recall and extraction; 404 on a session means "no
    history". (The gateway's ``SessionsClient`` is the other client of memory: sessions
    and messages for the public API.)

    Every call is tried again within ``retry`` (``weft_platform.retry``): a memory
    restart is waited out; :class:`MemoryUnavailable` means the window was used up or
    memory refused the request (4xx other than the 404s read as "none")."""

    base_url: str
    timeout_s: float = 10.0
    transport: httpx.AsyncBaseTransport | None = None
    retry: RetryWindow = field(default_factory=lambda: RetryWindow(window_s=0))
    _http: httpx.AsyncClient | None = field(default=None, init=False, repr=False)

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(
                base_url=self.base_url, timeout=self.timeout_s, transport=self.transport,
                event_hooks=propagation_hooks(),
            )  # fmt: skip
        return self._http

    async def _call(
        self, method: str, path: str, *, resend: bool = True, **kw: Any
    ) -> httpx.Response:
        try:
            return await request_within(
                self._client(), self.retry, method, path, resend=resend, **kw
            )
        except httpx.HTTPError as exc:
            raise MemoryUnavailable(f"memory unreachable: {exc}") from exc

    async def history(
        self,
        tenant_id: str,
        session_id: str,
        *,
        token_budget: int,
        retain_retrieval_history: bool = False,
        vision: bool = False,
        after: str | None = None,
        credential: str | None = None,
    ) -> LoadedHistory:
        """History within ``token_budget`` (pass the whole context window, SPEC M-08);
        with ``vision``, stored images come back as image parts (SPEC E-26). ``after``:
        the session's previous turn, which memory waits for if it has not stored its end
        yet (it ended a moment ago and its ``complete`` is still on its way)."""
        params = {
            "tenant_id": tenant_id,
            "token_budget": token_budget,
            "retain_retrieval_history": str(retain_retrieval_history).lower(),
            "vision": str(vision).lower(),
        }
        if after is not None:
            params["after"] = after
        resp = await self._call(
            "GET",
            f"/internal/sessions/{session_id}/history",
            params=params,
            headers=bearer(credential),
        )
        if resp.status_code == 404:
            return LoadedHistory(messages=[], turn_ids=[])
        _raise_for(resp)
        body = resp.json()
        messages = history_messages(body.get("messages"), session_id)
        turn_ids: list[str | None] = [None] * len(messages)
        for turn in body.get("turns", []):
            for k in range(turn["start"], turn["start"] + turn["count"]):
                turn_ids[k] = turn["turn_id"]
        return LoadedHistory(
            messages=messages, turn_ids=turn_ids, summary=body.get("summary"),
            checkpoint_turn_id=body.get("checkpoint_turn_id"), tokens=body.get("tokens", 0),
            token_scale=body.get("token_scale"),
            previous_turn_stored=body.get("previous_turn_stored"),
        )  # fmt: skip

    async def store_checkpoint(
        self,
        tenant_id: str,
        session_id: str,
        result: CompactionResult,
        *,
        credential: str | None = None,
    ) -> bool:
        """Persist ``result.checkpoint`` (SPEC M-07); False when there is none or memory has
        no such assistant message (the reference only logs that)."""
        checkpoint: Checkpoint | None = result.checkpoint
        if checkpoint is None:
            return False
        body = {
            "summary": checkpoint.summary,
            "degraded": checkpoint.degraded,
            "tokens_before": result.tokens_before,
            "tokens_after": result.tokens_after,
        }
        return await self._put_context(tenant_id, session_id, checkpoint.turn_id, body, credential)

    async def store_token_scale(
        self,
        tenant_id: str,
        session_id: str,
        turn_id: str,
        scale: float,
        *,
        credential: str | None = None,
    ) -> bool:
        """Persist a measured calibration scale on a stored turn (SPEC M-02)."""
        body = {"token_scale": scale}
        return await self._put_context(tenant_id, session_id, turn_id, body, credential)

    async def _put_context(
        self,
        tenant_id: str,
        session_id: str,
        turn_id: str,
        body: dict[str, Any],
        credential: str | None,
    ) -> bool:
        path = f"/internal/sessions/{session_id}/turns/{turn_id}/context"
        resp = await self._call(
            "PUT", path, params={"tenant_id": tenant_id}, json=body, headers=bearer(credential)
        )
        if resp.status_code == 404:
            return False
        _raise_for(resp)
        return True

    async def recall(
        self,
        tenant_id: str,
        user_id: str,
        query: str,
        limit: int = 10,
        *,
        credential: str | None = None,
    ) -> list[Recalled]:
        """Long-term memories of the caller for ``query`` (only for memory-enabled agents)."""
        params = {"tenant_id": tenant_id, "user_id": user_id, "query": query, "limit": limit}
        resp = await self._call(
            "GET", "/internal/memories/search", params=params, headers=bearer(credential)
        )
        _raise_for(resp)
        return [
            Recalled(id=m["id"], content=m["content"], score=m.get("score", 0.0))
            for m in resp.json()["memories"]
        ]

    async def extract(
        self,
        tenant_id: str,
        user_id: str,
        session_id: str,
        request_id: str,
        *,
        credential: str | None = None,
    ) -> int:
        """Learn from a completed turn; the number of facts stored (0 when the turn is not
        stored yet: memory persists from events asynchronously)."""
        body = {
            "tenant_id": tenant_id,
            "user_id": user_id,
            "session_id": session_id,
            "request_id": request_id,
        }
        # Not resent once it may have reached memory: a second extraction of the same
        # turn could store its facts twice.
        resp = await self._call(
            "POST",
            "/internal/memories/extract",
            resend=False,
            json=body,
            headers=bearer(credential),
        )
        if resp.status_code == 404:
            return 0
        _raise_for(resp)
        return len(resp.json()["memory_ids"])

    async def live_grants(self, state: TurnState) -> list[Grant]:
        """SPEC H-04: the live grants of the turn's user for its session and agent."""
        params = {"session_id": state.session_id, "agent_id": state.agent.agent_id}
        resp = await self._call(
            "GET", "/internal/grants/live", params=params, headers=bearer(state.credential)
        )
        _raise_for(resp)
        return [Grant.model_validate(g) for g in resp.json()["grants"]]

    async def put_suspension(self, state: TurnState, blob: str) -> None:
        """Keep the state of a turn that waits for a person (newest version wins)."""
        resp = await self._call(
            "PUT", _suspension(state.request_id), json={"version": state.version, "state": blob},
            headers=bearer(state.credential),
        )  # fmt: skip
        _raise_for(resp)

    async def get_suspension(
        self, request_id: str, credential: str | None
    ) -> tuple[int, str] | None:
        """The kept state of a waiting turn (version, blob), or None."""
        resp = await self._call("GET", _suspension(request_id), headers=bearer(credential))
        if resp.status_code == 404:
            return None
        _raise_for(resp)
        body = resp.json()
        return int(body["version"]), str(body["state"])

    async def delete_suspension(self, state: TurnState) -> None:
        """Forget it once nobody is asked any more."""
        resp = await self._call(
            "DELETE", _suspension(state.request_id), headers=bearer(state.credential)
        )
        if resp.status_code != 404:
            _raise_for(resp)

    async def aclose(self) -> None:
        """Close the connection pool."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None


def _suspension(request_id: str) -> str:
    return f"/internal/turns/{request_id}/suspension"


def _raise_for(resp: httpx.Response) -> None:
    if resp.status_code >= 400:
        raise MemoryUnavailable(f"memory answered {resp.status_code}: {resp.text[:200]}")


def history_messages(raw: object, session_id: str) -> list[ChatMessage]:
    """The messages of memory's history answer, validated once here, where stored messages
    enter the engine: every later step reads them by their typed keys."""
    try:
        messages: list[ChatMessage] = CHAT_MESSAGES.validate_python(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "list"
        raise MalformedHistory(
            f"session {session_id}: stored message {where} is malformed: {first['msg']}"
            f" ({exc.error_count()} error(s))"
        ) from exc
    return messages
