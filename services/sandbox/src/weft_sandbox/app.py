"""App factory of the sandbox service (a placeholder: every sandbox call gets a
failed result the model can read, or a refusal outside the call's tool set)."""

from __future__ import annotations

import structlog
from fastapi import FastAPI
from weft_contracts import (
    ToolCallCompleted,
    ToolCallCompletedData,
    ToolCallRequested,
    Topic,
    tool_not_allowed,
)
from weft_platform.app import create_service_app, init_logging
from weft_platform.bus import EventBus
from weft_platform.runtime import create_runtime
from weft_platform.settings import ServiceSettings

log = structlog.get_logger(__name__)

CONSUMER_GROUP = "weft-sandbox"
NOT_AVAILABLE = (
    "sandbox tools are not available yet in this Weft version; "
    "answer without {tool} or tell the user it cannot be done here"
)


class SandboxSettings(ServiceSettings):
    """sandbox settings."""

    service_name: str = "sandbox"
    http_port: int = 8084


class SandboxUnavailable:
    """Answers each sandbox call with a failed result the model can read; a call outside
    its context's tool set gets a refusal instead (fail closed when the set is absent)."""

    def __init__(self, bus: EventBus, worker: str):
        self._bus = bus
        self._worker = worker

    async def handle(self, call: ToolCallRequested) -> None:
        """Publish the "not available yet" result of ``call``, or its refusal when the
        tool is outside the call's tool set (the check the real sandbox keeps)."""
        name = call.data.tool_name
        if call.data.context.permits(name):
            error = NOT_AVAILABLE.format(tool=name)
        else:
            error = tool_not_allowed(name, call.data.context.allowed_tools)
            log.warning("tool_not_allowed", call_id=call.data.call_id, request_id=call.request_id)
        await self._bus.publish(
            Topic.TOOL_RESULTS,
            ToolCallCompleted(
                tenant_id=call.tenant_id,
                session_id=call.session_id,
                request_id=call.request_id,
                traceparent=call.traceparent,
                credential=call.credential,
                data=ToolCallCompletedData(
                    call_id=call.data.call_id,
                    tool_name=call.data.tool_name,
                    success=False,
                    error=error,
                    worker=self._worker,
                ),
            ),
        )


def create_app(settings: SandboxSettings | None = None) -> FastAPI:
    """Wire the placeholder to ``sandbox.calls``."""
    runtime = create_runtime(settings or SandboxSettings())
    init_logging(runtime)
    runtime.bus.consume(
        Topic.SANDBOX_CALLS,
        CONSUMER_GROUP,
        SandboxUnavailable(runtime.bus, runtime.instance_id).handle,
    )
    return create_service_app(runtime, title="weft sandbox (not available yet)")
