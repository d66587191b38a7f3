"""Internal HTTP clients of the gateway: memory and agent-config."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
from fastapi import HTTPException
from weft_contracts import AgentConfig
from weft_platform.internal_auth import bearer, outbound_credential
from weft_platform.retry import RetryWindow, request_within
from weft_platform.tracing import service_client

KEEPALIVE_EXPIRY_S = 2.0
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE"})
"""Methods whose request may be sent again after it may have reached the service."""
NO_RETRY = RetryWindow(window_s=0)


class ServiceClient:
    """A JSON client that turns a downstream 404/4xx into the same status for our caller.

    Failures to connect, timeouts and 5xx are tried again within ``retry``
    (``weft_platform.retry``; a non-idempotent request only when it never left)."""

    def __init__(
        self,
        base_url: str,
        name: str,
        timeout_s: float = 10.0,
        max_connections: int = 100,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        retry: RetryWindow = NO_RETRY,
    ):
        # Idle connections are dropped well before uvicorn's 5 s keep-alive timeout closes
        # them on the server side: reusing one the server is closing failed requests with
        # RemoteProtocolError (a 503) under load.
        limits = httpx.Limits(
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=KEEPALIVE_EXPIRY_S,
        )
        self._http = service_client(base_url, timeout_s, transport=transport, limits=limits)
        self._name = name
        self._retry = retry

    async def call(
        self,
        method: str,
        path: str,
        *,
        resend: bool | None = None,
        retry: bool = True,
        **kwargs: Any,
    ) -> Any:
        """Send a request; 4xx are re-raised as HTTPException, 5xx/transport (once the
        retry window is used up) as 503 with ``Retry-After`` and the reason.
        ``resend``: the request is idempotent (default: by its method); ``retry=False``
        for a caller that must fail fast."""
        resp = await self.send(method, path, resend=resend, retry=retry, **kwargs)
        return None if resp.status_code == 204 or not resp.content else resp.json()

    async def send(
        self, method: str, path: str, *, resend: bool | None = None, retry: bool = True,
        **kwargs: Any,
    ) -> httpx.Response:  # fmt: skip
        """:meth:`call`, answering the response itself (a body that is not JSON)."""
        window = self._retry if retry else NO_RETRY
        idempotent = method in IDEMPOTENT if resend is None else resend
        # The credential of the request being served (ApiKeyAuth); none: the service 401s.
        # A credential the caller names itself (a service credential) wins.
        kwargs["headers"] = {**bearer(outbound_credential.get()), **kwargs.get("headers", {})}
        try:
            resp = await request_within(
                self._http, window, method, path, resend=idempotent, **kwargs
            )
        except httpx.HTTPError as exc:
            reason = type(exc).__name__
            if isinstance(exc, httpx.TimeoutException):
                reason = f"no answer in time ({reason})"
            raise HTTPException(
                503, f"{self._name} unavailable: {reason}; retry", {"Retry-After": "2"}
            ) from exc
        if 400 <= resp.status_code < 500:
            raise HTTPException(resp.status_code, _detail(resp))
        if resp.status_code >= 500:
            raise HTTPException(
                503, f"{self._name} failed ({resp.status_code})", {"Retry-After": "2"}
            )
        return resp

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()


class SessionsClient(ServiceClient):
    """Sessions and messages, owned by memory. Every call by session id names the caller
    (tenant and user): memory answers 404 for another user's session."""

    async def create_session(
        self, tenant_id: str, user_id: str, title: str, agent_id: str | None
    ) -> Any:
        body = {"tenant_id": tenant_id, "user_id": user_id, "title": title, "agent_id": agent_id}
        return await self.call("POST", "/internal/sessions", json=body)

    async def get_session(
        self, tenant_id: str, user_id: str, session_id: str, *, timeout_s: float | None = None
    ) -> Any:
        """One session of the caller; ``timeout_s`` overrides the client's timeout (the
        chat path's ownership lookup fails fast instead of holding the request)."""
        timeout = httpx.USE_CLIENT_DEFAULT if timeout_s is None else httpx.Timeout(timeout_s)
        return await self.call(
            "GET",
            f"/internal/sessions/{session_id}",
            params=_caller(tenant_id, user_id),
            timeout=timeout,
            retry=timeout_s is None,
        )

    async def list_sessions(
        self, tenant_id: str, user_id: str, limit: int, offset: int, q: str | None = None
    ) -> Any:
        """The user's sessions, newest first; with ``q`` only those whose title or a
        message contains it (memory's search, literal and case-insensitive)."""
        params = _caller(tenant_id, user_id) | {"limit": limit, "offset": offset}
        if q is not None:
            params["q"] = q
        return await self.call("GET", "/internal/sessions", params=params)

    async def update_session(
        self, tenant_id: str, user_id: str, session_id: str, changes: dict[str, Any]
    ) -> Any:
        return await self.call(
            "PATCH",
            f"/internal/sessions/{session_id}",
            params=_caller(tenant_id, user_id),
            json=changes,
        )

    async def delete_session(self, tenant_id: str, user_id: str, session_id: str) -> None:
        await self.call(
            "DELETE", f"/internal/sessions/{session_id}", params=_caller(tenant_id, user_id)
        )

    async def delete_messages(
        self, tenant_id: str, user_id: str, session_id: str, from_message: str | None = None
    ) -> None:
        params = _caller(tenant_id, user_id) | ({"from": from_message} if from_message else {})
        await self.call("DELETE", f"/internal/sessions/{session_id}/messages", params=params)

    async def delete_message(
        self, tenant_id: str, user_id: str, session_id: str, message_id: str
    ) -> None:
        await self.call(
            "DELETE",
            f"/internal/sessions/{session_id}/messages/{message_id}",
            params=_caller(tenant_id, user_id),
        )

    async def fork_session(
        self, tenant_id: str, user_id: str, session_id: str, at_message_id: str | None
    ) -> Any:
        """A new session with the history and workspace up to the turn of
        ``at_message_id`` (none: all of it)."""
        return await self.call(
            "POST",
            f"/internal/sessions/{session_id}/fork",
            params=_caller(tenant_id, user_id),
            json={"at_message_id": at_message_id},
        )

    async def list_messages(
        self, tenant_id: str, user_id: str, session_id: str, limit: int, before: str | None = None
    ) -> Any:
        params: dict[str, Any] = _caller(tenant_id, user_id) | {"limit": limit}
        if before:
            params["before"] = before
        return await self.call("GET", f"/internal/sessions/{session_id}/messages", params=params)


def _caller(tenant_id: str, user_id: str) -> dict[str, Any]:
    return {"tenant_id": tenant_id, "user_id": user_id}


class AgentConfigClient(ServiceClient):
    """Agent resolution, owned by agent-config."""

    async def resolve(
        self,
        tenant_id: str,
        agent_id: str,
        knowledge_base_ids: list[str] | None,
        key_knowledge_base_ids: list[str] | None = None,
        *,
        reasoning_effort: str | None = None,
        summary_model_id: str | None = None,
    ) -> AgentConfig:
        """The runtime config; agent-config applies the key's KB restriction (A-09), the
        request's reasoning effort (A-05) and the sharing rules (A-10)."""
        body = {
            "tenant_id": tenant_id,
            "agent_id": agent_id,
            "knowledge_base_ids": knowledge_base_ids,
            "key_knowledge_base_ids": key_knowledge_base_ids,
            "reasoning_effort": reasoning_effort,
            "summary_model_id": summary_model_id,
        }
        # A later agent-config's fields are ignored (weft_contracts.compat): either side
        # can be upgraded first.
        config = await self.call("POST", "/internal/resolve", resend=True, json=body)
        return AgentConfig.model_validate(config, extra="ignore")

    async def require_agent(self, tenant_id: str, agent_id: str) -> None:
        """404 naming the agent unless the tenant may chat with it (a built-in, its own or
        one shared with it), 422 with the reason for a built-in that cannot run here: a
        session bound to such an agent would only fail at its first chat."""
        path = f"/internal/agents/{quote(agent_id, safe='')}"
        missing = HTTPException(404, f"agent {agent_id!r} not found")
        try:
            view = await self.call("GET", path, params={"tenant_id": tenant_id})
        except HTTPException as exc:
            if exc.status_code == 404:
                raise missing from None
            raise
        if not isinstance(view, dict) or view.get("id") != agent_id:  # e.g. GET .../tools
            raise missing
        if view.get("available") is False:
            reason = view.get("unavailable_reason")
            raise HTTPException(422, f"agent {agent_id!r} is not available: {reason}")


def _detail(resp: httpx.Response) -> Any:
    try:
        body = resp.json()
    except ValueError:
        return resp.text
    return body.get("detail", body) if isinstance(body, dict) else body
