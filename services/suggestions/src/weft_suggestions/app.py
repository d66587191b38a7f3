"""App factory of the suggestions service (a placeholder: it answers that suggested
questions are not available)."""

from __future__ import annotations

from collections.abc import Sequence

import structlog
from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse
from weft_contracts import Topic
from weft_platform.app import create_service_app, init_logging
from weft_platform.runtime import create_runtime
from weft_platform.settings import ServiceSettings

CONSUMER_GROUP = "weft-suggestions"
NOT_AVAILABLE = "suggested questions are not available yet in this Weft version"

log = structlog.get_logger(__name__)


class SuggestionsSettings(ServiceSettings):
    """suggestions settings."""

    service_name: str = "suggestions"
    http_port: int = 8086


FOLLOW_UP_TRIGGERS = frozenset({"complete"})
"""The only events follow-ups will need (SPEC Q-*): the end of a turn. Every other record
of ``agent.events`` (deltas, tool events: nearly all of them) is skipped by its ``type``
header without being decoded."""


async def observe_completions(events: Sequence[object]) -> None:
    """Follow-ups will be generated on ``complete``; for now the turns are only seen."""
    log.debug("turns_completed", count=len(events))


def suggestions_router() -> APIRouter:
    """The suggestions API, answering 501 until it is built."""
    router = APIRouter(prefix="/api/v1", tags=["suggestions"])

    @router.get("/sessions/{session_id}/suggestions", status_code=501)
    async def get_suggestions(session_id: str) -> JSONResponse:
        return JSONResponse({"detail": NOT_AVAILABLE, "session_id": session_id}, status_code=501)

    return router


def create_app(settings: SuggestionsSettings | None = None) -> FastAPI:
    """Wire the placeholder consumer and API."""
    runtime = create_runtime(settings or SuggestionsSettings())
    init_logging(runtime)
    # One commit per fetch instead of one per record, and fetches held up to a second so
    # they are large: the placeholder must not cost CPU in proportion to the event stream
    # (follow-ups can start a second late).
    runtime.bus.consume_batch(
        Topic.AGENT_EVENTS,
        CONSUMER_GROUP,
        observe_completions,
        types=FOLLOW_UP_TRIGGERS,
        linger_ms=1000,
    )
    return create_service_app(
        runtime, title="weft suggestions (not available yet)", routers=[suggestions_router()]
    )
