"""The engine's metrics: turns started and ended, rounds, and every model call
(``weft_platform.metrics`` defines them; docs/observability.md lists them).

A turn's end reason is the :data:`~weft_engine.outcomes.EndReason` case that ended it
(``answered``, ``stopped``, ``iteration_limit`` ...). ``TurnLoop._finish`` names it in a
context variable around its call of the Finisher, and the
Finisher counts the end only when its ``complete`` is really sent (a takeover that finds
it sent counts nothing twice).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from weft_platform.metrics import (
    ROUND_DURATION,
    ROUNDS,
    TURN_DURATION,
    TURNS_ENDED,
    TURNS_STARTED,
    budget_rejected,
    tenant_label,
)

from weft_engine.outcomes import EndReason, OverBudget
from weft_engine.state import TurnState

_END_REASON: ContextVar[str] = ContextVar("weft_end_reason", default="unknown")

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def end_reason_label(reason: EndReason) -> str:
    """``IterationLimit`` -> ``iteration_limit``: one value per EndReason case."""
    return _CAMEL.sub("_", type(reason).__name__).lower()


@contextmanager
def ending(reason: EndReason) -> Iterator[None]:
    """Within: the turn being ended ends for ``reason`` (read by :func:`turn_ended`).
    The value lives only as long as the block, so an end this task reaches by another
    path later (the auditor, a refused start) is never counted under this reason."""
    token = _END_REASON.set(end_reason_label(reason))
    if isinstance(reason, OverBudget):
        budget_rejected(reason.exceeded.budget, reason.state.tenant_id)
    try:
        yield
    finally:
        _END_REASON.reset(token)


def turn_started(tenant_id: str, mode: str) -> None:
    """A turn was opened."""
    TURNS_STARTED.labels(mode, tenant_label(tenant_id)).inc()


def turn_ended(state: TurnState, status: str) -> None:
    """The turn's ``complete`` was sent with ``status``."""
    TURNS_ENDED.labels(status, _END_REASON.get(), tenant_label(state.tenant_id)).inc()
    TURN_DURATION.labels(status).observe(max(0.0, time.time() - state.started_at))


def round_done(seconds: float) -> None:
    """One round's model call finished."""
    ROUNDS.inc()
    ROUND_DURATION.observe(seconds)
