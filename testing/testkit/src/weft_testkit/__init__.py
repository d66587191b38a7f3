"""Test kit: run a whole Weft stack (7 services + the scripted LLM test double) as local
processes against the real Kafka, PostgreSQL and Redis, isolated by a topic prefix."""

from weft_testkit.llm_log import chat_requests
from weft_testkit.sse import SseEvent, read_turn
from weft_testkit.stack import LocalStack, StackConfig, infra_env

__all__ = [
    "LocalStack",
    "SseEvent",
    "StackConfig",
    "chat_requests",
    "infra_env",
    "read_turn",
]
