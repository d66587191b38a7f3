"""Per-topic retention of new topics (WEFT_TOPIC_RETENTION_MS[_<NAME>]): what the chart's
kafka.retentionMs values become in the topics job (weft_platform.topics)."""

from __future__ import annotations

import pytest
from weft_contracts import Topic
from weft_platform.topics import new_topics, retention_for


def test_a_topic_takes_its_own_retention_then_the_default_then_the_brokers() -> None:
    env = {"WEFT_TOPIC_RETENTION_MS": "604800000", "WEFT_TOPIC_RETENTION_MS_DLQ": "-1"}
    made = {t.name: t.topic_configs for t in new_topics([Topic.DLQ, Topic.TOOL_CALLS], env)}
    assert made["weft.dlq.v1"]["retention.ms"] == "-1"
    assert made["weft.tool.calls.v1"]["retention.ms"] == "604800000"
    (plain,) = new_topics([Topic.TOOL_CALLS], {})
    assert "retention.ms" not in plain.topic_configs, "unset: the broker's default"
    assert plain.topic_configs["min.insync.replicas"] == "1"


@pytest.mark.parametrize("raw", ["-2", "seven days", "1.5"])
def test_a_bad_retention_is_refused_before_any_topic_is_made(raw: str) -> None:
    with pytest.raises(ValueError):
        retention_for(Topic.DLQ, {"WEFT_TOPIC_RETENTION_MS_DLQ": raw})
