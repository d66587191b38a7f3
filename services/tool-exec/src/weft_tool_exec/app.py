"""App factory of tool-exec."""

from __future__ import annotations

from fastapi import FastAPI
from weft_contracts import Topic
from weft_platform.app import create_service_app, init_logging
from weft_platform.runtime import create_runtime
from weft_platform.settings import ServiceSettings
from weft_storage.knowledge import KnowledgeStore
from weft_tools.builtin import builtin_registry

from weft_tool_exec.worker import ToolWorker

CONSUMER_GROUP = "weft-tool-exec"


class ToolExecSettings(ServiceSettings):
    """tool-exec settings."""

    service_name: str = "tool-exec"
    http_port: int = 8083


def create_app(settings: ToolExecSettings | None = None) -> FastAPI:
    """Wire the worker to ``tool.calls``."""
    runtime = create_runtime(settings or ToolExecSettings())
    init_logging(runtime)
    registry = builtin_registry(KnowledgeStore(runtime.sessions))
    worker = ToolWorker(runtime.bus, registry, runtime.instance_id)
    runtime.bus.consume(Topic.TOOL_CALLS, CONSUMER_GROUP, worker.handle)
    return create_service_app(runtime, title="weft tool-exec")
