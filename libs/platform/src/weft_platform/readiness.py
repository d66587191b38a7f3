"""How long a shared dependency may be away before a replica stops being ready, and the
drain that begins on SIGTERM.

A blip of Kafka, PostgreSQL or Redis reaches every replica at once: if each one failed
its readiness probe at the first failed check, the orchestrator would take every gateway
out of its Service together, and clients would get connection errors instead of the
503 with Retry-After the replicas answer meanwhile (``weft_platform.app``). So a shared
dependency that this process has reached before counts as *degraded* (``/readyz`` still
200) until it has been failing for longer than ``readiness_grace_s``; then the replica is
not ready. One that was never reached since start is not ready at once: a new replica
takes no traffic before it has seen its dependencies.

The time is measured between readiness probes (``/readyz`` runs the checks): the first
failing probe starts the clock, the first passing one stops it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

Clock = Callable[[], float]
"""Seconds from an arbitrary origin that never goes backwards (``time.monotonic``)."""

Verdict = Literal["ok", "degraded", "down"]
"""One dependency's standing: answering; failing within the grace; failing past it (or
never reached yet)."""

SHARED_DEPENDENCIES = frozenset({"kafka", "postgres", "redis"})
"""The readiness checks the grace applies to (a service's own checks fail at once)."""


@dataclass(kw_only=True)
class DependencyGrace:
    """The state machine of the readiness grace, one per process.

    A dependency moves ``never seen -> ok`` on its first passing check, ``ok -> degraded``
    on a failing one, ``degraded -> down`` once failing longer than ``grace_s``, and back
    to ``ok`` on any passing check. ``grace_s`` 0: a failing check is ``down`` at once.
    """

    grace_s: float
    """``WEFT_READINESS_GRACE_S``: how long a reached dependency may fail before the
    replica is not ready."""
    clock: Clock = time.monotonic
    """Injected in tests (a fake clock)."""
    _reached: set[str] = field(default_factory=set)
    _failing_since: dict[str, float] = field(default_factory=dict)

    def judge(self, name: str, ok: bool) -> Verdict:
        """Record one check's result and say where ``name`` stands."""
        if ok:
            self._reached.add(name)
            self._failing_since.pop(name, None)
            return "ok"
        if name not in self._reached or self.grace_s <= 0:
            return "down"
        since = self._failing_since.setdefault(name, self.clock())
        return "down" if self.clock() - since > self.grace_s else "degraded"

    def failing_for(self, name: str) -> float:
        """Seconds ``name`` has been failing (0 when it is not)."""
        since = self._failing_since.get(name)
        return 0.0 if since is None else self.clock() - since


@dataclass(kw_only=True)
class Readiness:
    """What ``/readyz`` answers beyond the checks themselves: the grace of the shared
    dependencies, and whether the process is draining (SIGTERM received)."""

    grace: DependencyGrace
    """The shared dependencies' grace."""
    draining: bool = False
    """Set on the first SIGTERM (``weft_platform.app.run_service``): ``/readyz`` answers 503
    from then on while requests in flight, and those that still arrive, are served."""

    def drain(self) -> None:
        """Stop being ready for good: the orchestrator sends no new traffic."""
        self.draining = True
