"""Bounded retries of internal HTTP calls: a brief outage is waited out, not failed.

A service that restarts (memory, agent-config) refuses connections for a few seconds and
may answer 5xx while it starts. Every internal client sends its requests through
:func:`request_within`, which tries again with exponential backoff and full jitter (so
the replicas that all saw the same outage do not come back in lockstep) until a
:class:`RetryWindow` is used up; then the last failure is the caller's to report.

What is tried again: a connection that could not be opened (the request never left,
always safe), and, for requests the caller marks ``resend`` (idempotent ones), a timeout,
a dropped connection and a 5xx answer. A 4xx answer is final: the same request would be
refused again. The wall-clock bound of one call is ``window_s`` plus one request's own
timeout (an attempt that started inside the window runs to its end).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import structlog
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_before_delay,
    wait_random_exponential,
)

log = structlog.get_logger(__name__)

T = TypeVar("T")

NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
"""Transport errors raised before the request reached the server: always safe to resend."""


@dataclass(frozen=True, kw_only=True)
class RetryWindow:
    """How long one internal call keeps trying, and how it spaces its tries."""

    window_s: float
    """No new try starts once this long has passed since the first (0: one try only)."""
    first_backoff_s: float = 0.2
    """Scale of the first pause; pauses grow twice as long each try, jittered in full."""
    max_backoff_s: float = 2.0
    """Cap of one pause: a service back from a restart is found within this much."""

    async def run(
        self,
        attempt: Callable[[], Awaitable[T]],
        *,
        retryable: Callable[[BaseException], bool],
        what: str,
    ) -> T:
        """Await ``attempt()`` until it returns, raises what ``retryable`` refuses, or the
        window is used up; the last exception is raised unchanged."""
        retrying = AsyncRetrying(
            stop=stop_before_delay(self.window_s),
            wait=wait_random_exponential(multiplier=self.first_backoff_s, max=self.max_backoff_s),
            retry=retry_if_exception(retryable),
            before_sleep=_logger(what),
            reraise=True,
        )
        result: T = await retrying(attempt)
        return result


class ServerError(Exception):
    """A 5xx answer, raised inside the retry loop so that it is tried again."""

    def __init__(self, response: httpx.Response):
        super().__init__(f"answered {response.status_code}")
        self.response = response


def transient(exc: BaseException, *, resend: bool) -> bool:
    """Whether an internal call that failed with ``exc`` is worth another try."""
    if isinstance(exc, NEVER_SENT):
        return True
    if not resend:
        return False
    return isinstance(exc, ServerError | httpx.TransportError)


async def request_within(
    client: httpx.AsyncClient,
    window: RetryWindow,
    method: str,
    url: str,
    *,
    resend: bool = True,
    **kwargs: Any,
) -> httpx.Response:
    """Send a request, trying again within ``window`` (see the module docstring).

    Returns the first answer below 500, or the last 5xx answer once the window is used
    up; raises the last transport error (``httpx.HTTPError``) when no answer came.
    ``resend``: the request is idempotent, so one that may have reached the server
    can be sent again.
    """

    async def attempt() -> httpx.Response:
        response = await client.request(method, url, **kwargs)
        if response.status_code >= 500:
            raise ServerError(response)
        return response

    try:
        return await window.run(
            attempt,
            retryable=lambda exc: transient(exc, resend=resend),
            what=f"{method} {client.base_url.join(url)}",
        )
    except ServerError as exc:
        return exc.response


def _logger(what: str) -> Callable[[RetryCallState], None]:
    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        pause = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning(
            "internal_call_retry",
            call=what,
            attempt=state.attempt_number,
            error=repr(error),
            pause_s=round(pause, 2),
            elapsed_s=round(state.seconds_since_start or 0.0, 2),
        )

    return before_sleep
