"""The fair order of knowledge's work queues (documents, wiki generation, graph
extraction): a worker claims the job of the tenant with the fewest jobs running now, so
one tenant's backlog never holds every worker (docs/fairness.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ScalarSelect, func, select
from sqlalchemy.orm import aliased


def running_per_tenant(model: Any, running: str, since: datetime) -> ScalarSelect[int]:
    """How many rows of ``model``'s tenant are in state ``running`` and were touched since
    ``since`` (a live claim, not an abandoned one): the fair order of every knowledge
    queue (documents, wiki generation, graph extraction) claims the tenant with the
    fewest first. Correlated to ``model``, the row being considered."""
    other = aliased(model)
    return (
        select(func.count())
        .select_from(other)
        .where(
            other.tenant_id == model.tenant_id,
            other.status == running,
            other.updated_at >= since,
        )
        .correlate(model)
        .scalar_subquery()
    )
