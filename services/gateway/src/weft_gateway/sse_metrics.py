"""SSE metrics of the gateway: open streams and how long an event took to reach a client.

Send latency runs from the event's own ``time`` (stamped by the service that published
it, the engine for a turn's events) to its frame being written to the client's
connection: it spans Kafka, the projector, Redis and the fan-out. The time is read from
the stored JSON once per event (:func:`event_epoch`, cached on the shared entry), and
one observation is made per client write.
"""

from __future__ import annotations

import time
from datetime import datetime

from weft_platform.metrics import SSE_CONNECTIONS, SSE_SEND_LATENCY

_TIME_FIELD = '"time":"'


def event_epoch(event_json: str) -> float | None:
    """The ``time`` of a stored event as epoch seconds (None when it has none)."""
    start = event_json.find(_TIME_FIELD)
    if start < 0:
        return None
    start += len(_TIME_FIELD)
    end = event_json.find('"', start)
    try:
        return datetime.fromisoformat(event_json[start:end]).timestamp()
    except ValueError:
        return None


def sent(epoch: float | None) -> None:
    """A frame of an event stamped at ``epoch`` was written to a client."""
    if epoch is not None:
        SSE_SEND_LATENCY.observe(max(0.0, time.time() - epoch))


def stream_opened() -> None:
    """An SSE response started streaming."""
    SSE_CONNECTIONS.inc()


def stream_closed() -> None:
    """An SSE response ended (however it ended)."""
    SSE_CONNECTIONS.dec()
