"""App factory of the engine."""

from __future__ import annotations

from fastapi import FastAPI
from weft_contracts import Topic
from weft_llm import OpenAIChatModel
from weft_platform.app import create_service_app, init_logging
from weft_platform.runtime import create_runtime

from weft_engine.emitter import EventEmitter
from weft_engine.history import HistoryClient
from weft_engine.loop import TurnRunner
from weft_engine.settings import EngineSettings
from weft_engine.state import TurnStore

REQUESTS_GROUP = "weft-engine"
RESULTS_GROUP = "weft-engine-results"


def create_app(settings: EngineSettings | None = None) -> FastAPI:
    """Wire the TurnRunner to ``agent.requests`` and ``tool.results``."""
    s = settings or EngineSettings()
    runtime = create_runtime(s)
    init_logging(runtime)
    model = OpenAIChatModel(base_url=s.openai_base_url, api_key=s.openai_api_key)
    history = HistoryClient(s.memory_url)
    runner = TurnRunner(
        bus=runtime.bus,
        store=TurnStore(runtime.redis, s.turn_state_ttl_s),
        emitter=EventEmitter(runtime.bus, runtime.redis, s.turn_state_ttl_s),
        model=model,
        history=history,
        settings=s,
    )
    runtime.bus.consume(Topic.AGENT_REQUESTS, REQUESTS_GROUP, runner.on_chat_requested)
    runtime.bus.consume(Topic.TOOL_RESULTS, RESULTS_GROUP, runner.on_tool_result)
    return create_service_app(
        runtime, title="weft engine", on_shutdown=[model.aclose, history.aclose]
    )
