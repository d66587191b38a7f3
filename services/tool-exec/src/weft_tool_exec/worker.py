"""ToolWorker: one tool call in, one result out, under the call's deadline."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import structlog
from weft_contracts import ToolCallCompleted, ToolCallCompletedData, ToolCallRequested, Topic
from weft_platform.bus import EventBus
from weft_tools import ToolInvocation, ToolOutcome, ToolRegistry

log = structlog.get_logger(__name__)


class ToolWorker:
    """Executes calls through the registry; every call ends in a published result.

    A tool that fails or overruns its deadline produces a failed result the model can
    read (STYLE principle 4, "final but reported"); only a failure to publish is raised,
    so that Kafka redelivers the call.
    """

    def __init__(self, bus: EventBus, registry: ToolRegistry, worker_name: str):
        self._bus = bus
        self._registry = registry
        self._worker = worker_name

    async def handle(self, call: ToolCallRequested) -> None:
        """Run ``call`` and publish its result."""
        started = time.monotonic()
        outcome = await self._run(call)
        result = ToolCallCompleted(
            tenant_id=call.tenant_id,
            session_id=call.session_id,
            request_id=call.request_id,
            traceparent=call.traceparent,
            data=ToolCallCompletedData(
                call_id=call.data.call_id,
                tool_name=call.data.tool_name,
                success=outcome.success,
                output=outcome.output,
                error=outcome.error,
                display_type=outcome.display_type,
                data=outcome.data,
                duration_ms=int((time.monotonic() - started) * 1000),
                worker=self._worker,
            ),
        )
        await self._bus.publish(Topic.TOOL_RESULTS, result)

    async def _run(self, call: ToolCallRequested) -> ToolOutcome:
        remaining = (call.data.deadline - datetime.now(UTC)).total_seconds()
        name = call.data.tool_name
        if remaining <= 0:
            return ToolOutcome(success=False, error=f"{name}: deadline passed before it could run")
        invocation = ToolInvocation(
            tenant_id=call.tenant_id,
            session_id=call.session_id,
            request_id=call.request_id,
            arguments=call.data.arguments,
            context=call.data.context,
        )
        try:
            async with asyncio.timeout(remaining):
                return await self._registry.execute(name, invocation)
        except TimeoutError:
            return ToolOutcome(success=False, error=f"{name}: timed out after {remaining:.0f}s")
        except Exception as exc:  # a broken tool is reported to the model, not a crash
            log.exception("tool_failed", tool=name, call_id=call.data.call_id)
            return ToolOutcome(success=False, error=f"{name} failed: {type(exc).__name__}: {exc}")
