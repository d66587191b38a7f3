"""TurnMeter: what a turn consumes, for the tenant's budgets and for metering.

After every model response the engine adds the provider's usage to the turn's totals
(``TurnState.metered``, reported on ``complete`` and stored by memory in ``usage``) and
to the tenant's budget windows in Redis (``weft_platform.budgets``), which the gateway
reads before it admits a turn. Before each model call of a running turn, the engine
checks those windows: a turn that crossed a budget finishes the round it was in (those
tokens are spent; cutting the stream would waste them and leave half a message), and
its next call is not made: the turn ends with ``budget_exceeded``.

The limits come with the turn (``ChatRequested.data.budget``, read by the gateway when it
admitted the turn, kept in ``TurnState.budget``): the engine opens no database. A turn
from an older gateway, without them, runs under the engine's configured defaults.
"""

from __future__ import annotations

import structlog
from redis.exceptions import RedisError
from weft_contracts import TurnUsage
from weft_llm import Usage
from weft_platform.budgets import BudgetExceeded, BudgetLimits, TokenBudgets

from weft_engine.state import TurnState

log = structlog.get_logger(__name__)


def with_usage(state: TurnState, usage: Usage | None) -> TurnState:
    """The state with one more model call and its tokens counted."""
    metered = state.metered
    update = {"llm_calls": metered.llm_calls + 1}
    if usage is not None:
        update["input_tokens"] = metered.input_tokens + usage.prompt_tokens
        update["output_tokens"] = metered.output_tokens + usage.completion_tokens
    return state.model_copy(update={"metered": metered.model_copy(update=update)})


def with_tool_calls(state: TurnState, count: int) -> TurnState:
    """The state with ``count`` more dispatched tool calls."""
    metered = state.metered
    calls: TurnUsage = metered.model_copy(update={"tool_calls": metered.tool_calls + count})
    return state.model_copy(update={"metered": calls})


class TurnMeter:
    """Counts model usage into the turn and the tenant's budget windows; checks them."""

    def __init__(self, budgets: TokenBudgets | None, defaults: BudgetLimits | None = None):
        self._budgets = budgets
        self._defaults = defaults or BudgetLimits()

    async def add(self, state: TurnState, usage: Usage | None) -> TurnState:
        """Count one model response. The budget counters are a fast guard, not the
        record (``complete`` carries the totals): when Redis fails the turn goes on."""
        state = with_usage(state, usage)
        if self._budgets is not None and usage is not None:
            tokens = usage.prompt_tokens + usage.completion_tokens
            try:
                await self._budgets.spend(state.tenant_id, tokens)
            except RedisError as exc:
                log.warning("budget_count_failed", request_id=state.request_id, error=repr(exc))
        return state

    async def exceeded(self, state: TurnState) -> BudgetExceeded | None:
        """The budget the turn's tenant is over, or None (also when it cannot tell)."""
        if self._budgets is None:
            return None
        try:
            return await self._budgets.exceeded(state.tenant_id, self.limits(state))
        except (RedisError, OSError) as exc:  # the gateway's admission holds
            log.warning("budget_check_failed", request_id=state.request_id, error=repr(exc))
            return None

    def limits(self, state: TurnState) -> BudgetLimits:
        """The turn's limits: those it came with, else the configured defaults."""
        if state.budget is None:
            return self._defaults
        return BudgetLimits(state.budget.tokens_per_minute, state.budget.tokens_per_day)
