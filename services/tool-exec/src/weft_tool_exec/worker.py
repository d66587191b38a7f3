"""ToolWorker: one tool call in, one result out, under the call's deadline."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import structlog
from weft_contracts import (
    OUTCOME_UNKNOWN_MARK,
    ToolCallRequested,
    Topic,
    tool_not_allowed,
)
from weft_contracts.tools import SHOWN_NAME_CHARS
from weft_platform.bus import EventBus
from weft_platform.metrics import observe_tool_call
from weft_tool_catalog import (
    Refused,
    TimedOut,
    ToolInvocation,
    ToolOutcome,
    ToolRegistry,
    ToolSpec,
    outcome_label,
)

from weft_tool_exec.ledger import CallLedger, Claim
from weft_tool_exec.tracing import WorkerTracer

log = structlog.get_logger(__name__)

OUTCOME_UNKNOWN = (
    "{name}: outcome unknown - the worker running this call stopped before reporting. "
    "It was a write and is not run again; check its effect before retrying."
)


def invocation_tenant(call: ToolCallRequested, spec: ToolSpec | None) -> str:
    """The tenant a tool reads: a shared agent's knowledge tools (those that need KB
    capabilities) read its owner's knowledge bases (SPEC E-26); every other tool, and
    every result, stays in the caller's tenant."""
    owner = call.data.context.retrieval_tenant_id
    needs_kb = spec is not None and bool(spec.requirement.any_of or spec.requirement.all_of)
    return owner if owner and needs_kb else call.tenant_id


def refusal(call: ToolCallRequested) -> ToolOutcome:
    """The failed result of a call outside its turn's tool set: the engine refuses such
    calls itself, so one reaching a worker was forged or sent by an engine that predates
    the tool set (which then permits nothing: fail closed)."""
    log.warning(
        "tool_not_allowed",
        tool=call.data.tool_name[:SHOWN_NAME_CHARS],
        call_id=call.data.call_id,
        request_id=call.request_id,
        tool_set_absent=call.data.context.allowed_tools is None,
    )
    allowed = call.data.context.allowed_tools
    return Refused(success=False, error=tool_not_allowed(call.data.tool_name, allowed))


class ToolWorker:
    """Executes calls through the registry; every call ends in a published result. A call
    of a tool outside its context's tool set is answered with a refusal, never run.

    A tool that fails or overruns its deadline produces a failed result the model can
    read (STYLE principle 4, "final but reported"); only a failure to publish is raised,
    so that Kafka redelivers the call. A redelivered write call is never replayed
    (invariant 3, :mod:`weft_tool_exec.ledger`).
    """

    def __init__(
        self,
        bus: EventBus,
        registry: ToolRegistry,
        worker_name: str,
        ledger: CallLedger,
        tracer: WorkerTracer | None = None,
    ):
        self._bus = bus
        self._registry = registry
        self._worker = worker_name
        self._ledger = ledger
        self._tracer = tracer or WorkerTracer(None, worker_name)

    async def handle(self, call: ToolCallRequested) -> None:
        """Run ``call`` (or report it) and publish its result."""
        started = time.monotonic()
        started_ns = time.time_ns()  # span start (SPEC E-23)
        if not call.data.context.permits(call.data.tool_name):
            outcome = refusal(call)
            self._tracer.call_done(call, outcome, started_ns)
            await self._publish(call, outcome, started)
            return
        spec = self._registry.spec(call.data.tool_name)
        is_write = spec is not None and not spec.read_only
        claim = await self._ledger.claim(call, self._worker) if is_write else Claim.RUN
        if claim is Claim.DONE:
            log.info("write_call_already_reported", call_id=call.data.call_id)
            return
        if claim is Claim.UNKNOWN:
            log.warning("write_call_outcome_unknown", call_id=call.data.call_id)
            outcome = ToolOutcome(
                success=False, error=OUTCOME_UNKNOWN.format(name=call.data.tool_name),
                data={OUTCOME_UNKNOWN_MARK: True},  # the engine asks a person (SPEC H-05)
            )  # fmt: skip
        else:
            outcome = await self._run(call)
        self._tracer.call_done(call, outcome, started_ns)
        await self._publish(call, outcome, started)
        if is_write:
            await self._ledger.finish(call)

    async def _publish(self, call: ToolCallRequested, outcome: ToolOutcome, started: float) -> None:
        seconds = time.monotonic() - started
        result = outcome.answering(call, duration_ms=int(seconds * 1000), worker=self._worker)
        await self._bus.publish(Topic.TOOL_RESULTS, result)
        tool = self._registry.metric_name(call.data.tool_name)
        observe_tool_call(tool, outcome_label(outcome), seconds, call.tenant_id)

    async def _run(self, call: ToolCallRequested) -> ToolOutcome:
        remaining = (call.data.deadline - datetime.now(UTC)).total_seconds()
        name = call.data.tool_name
        if remaining <= 0:
            return ToolOutcome(success=False, error=f"{name}: deadline passed before it could run")
        invocation = ToolInvocation(
            tenant_id=invocation_tenant(call, self._registry.spec(name)),
            session_id=call.session_id,
            request_id=call.request_id,
            arguments=call.data.arguments,
            context=call.data.context,
            credential=call.credential,
            call_id=call.data.call_id,
        )
        try:
            async with asyncio.timeout(remaining):
                return await self._registry.execute(name, invocation)
        except TimeoutError:
            return TimedOut(success=False, error=f"{name}: timed out after {remaining:.0f}s")
        except Exception as exc:  # a broken tool is reported to the model, not a crash
            log.exception("tool_failed", tool=name, call_id=call.data.call_id)
            return ToolOutcome(success=False, error=f"{name} failed: {type(exc).__name__}: {exc}")
