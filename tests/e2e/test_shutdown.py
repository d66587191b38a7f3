"""Graceful shutdown on SIGTERM: a service stops its consumers, closes its
connections and exits; the records it had not committed go back to Kafka."""

from __future__ import annotations

import signal

from weft_testkit import LocalStack


def test_sigterm_stops_a_service_cleanly(stack: LocalStack) -> None:
    port = stack.start_extra("memory", [])
    status = stack.kill("memory", -1, signal.SIGTERM)
    # uvicorn re-raises the signal after its graceful shutdown, so the exit status is
    # "terminated by SIGTERM"; what matters is that shutdown ran to the end (below).
    assert status in (0, -signal.SIGTERM)
    text = stack.log_path("memory", port).read_text()
    assert "service_stopping" in text and "service_stopped" in text
