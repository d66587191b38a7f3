"""The FastAPI application of the scripted LLM test double."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from weft_scripted_llm import control_routes, openai_routes
from weft_scripted_llm.settings import Settings
from weft_scripted_llm.state import ServerState
from weft_scripted_llm.timing import ExchangeClock

log = logging.getLogger("weft_scripted_llm")


def create_app(settings: Settings | None = None) -> FastAPI:
    """An app answering as the TEST DOUBLE configured by `settings`."""
    settings = settings or Settings()
    state = ServerState(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        log.info(
            "weft-scripted-llm TEST DOUBLE (not a real model) ready: policy=%s",
            state.policy.name,
        )
        yield
        state.release_stalls()

    app = FastAPI(
        title="Weft scripted LLM (test double)",
        description=control_routes.DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.scripted_llm = state
    app.include_router(openai_routes.router)
    app.include_router(control_routes.router)
    app.add_middleware(ExchangeClock)
    return app
