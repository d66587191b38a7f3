"""Weft's topics as ``weft-ops-topics`` sees them: describe, create the missing ones (the
partitions and durability of ``weft_platform.topics``), add partitions.

Adding partitions changes which partition a key hashes to. Every topic but
``tool.calls`` is keyed by session, and a session's order holds only within one
partition (ARCHITECTURE invariant 1): a session with records in flight on the old
partition and new ones on another may see them handled out of order. Hence
:data:`REPARTITION_WARNING` and the ``--yes`` the command demands.
"""

from __future__ import annotations

from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewPartitions
from aiokafka.errors import for_code
from weft_contracts import Topic
from weft_platform.kafka_acls import OPS_TOPICS
from weft_platform.topics import new_topics

from weft_cli.kafka_link import admin_client, refused
from weft_cli.outcome import CommandFailed, ExitCode
from weft_cli.settings import KafkaSettings

REPARTITION_WARNING = (
    "Adding partitions moves keys: a session whose key hashes to another partition "
    "afterwards gets its next records there, while records already written (and any turn "
    "in flight) stay on the old one. Per-session order is only guaranteed within one "
    "partition, so drain first: stop sending new turns, wait until no turn runs and "
    "`weft lag` shows 0 for the topic's consumer groups, then add partitions and resume."
)
_OK, _UNKNOWN_TOPIC, _TOPIC_REFUSED, _EXISTS = 0, 3, 29, 36


def resolve(name: str) -> Topic:
    """A topic from its full name (``weft.agent.requests.v1``), its short name
    (``agent.requests``) or its constant (``AGENT_REQUESTS``)."""
    for topic in Topic:
        short = topic.value.removeprefix("weft.").removesuffix(".v1")
        if name in (topic.value, short, topic.name, topic.name.lower()):
            return topic
    known = ", ".join(t.value.removeprefix("weft.").removesuffix(".v1") for t in Topic)
    raise CommandFailed(f"unknown topic {name[:100]!r}; one of: {known}", ExitCode.USAGE)


async def describe(settings: KafkaSettings) -> list[dict[str, Any]]:
    """Each Weft topic of the deployment: its partitions, or that it is missing."""
    async with admin_client(settings, OPS_TOPICS) as admin:
        return await _described(admin, settings)


async def _described(admin: AIOKafkaAdminClient, settings: KafkaSettings) -> list[dict[str, Any]]:
    names = [settings.topic_prefix + t.value for t in Topic]
    found = {t["topic"]: t for t in await admin.describe_topics(names)}
    rows = []
    for name in names:
        info = found.get(name, {"error_code": _UNKNOWN_TOPIC, "partitions": []})
        code = info["error_code"]
        if code == _TOPIC_REFUSED:
            raise refused(settings, OPS_TOPICS, for_code(code)())
        exists = code == _OK
        rows.append({"topic": name, "exists": exists,
                     "partitions": len(info["partitions"]) if exists else None})  # fmt: skip
    return rows


async def ensure(settings: KafkaSettings, env: dict[str, str]) -> list[dict[str, Any]]:
    """Create the deployment's missing topics; each topic with what was done."""
    async with admin_client(settings, OPS_TOPICS) as admin:
        rows = await _described(admin, settings)
        missing = [t for t, row in zip(Topic, rows, strict=True) if not row["exists"]]
        try:
            wanted = new_topics(missing, env, settings.topic_prefix)
        except ValueError as exc:  # partitions or durability settings
            raise CommandFailed(f"topic settings: {exc}", ExitCode.USAGE) from exc
        created: dict[str, int] = {}
        if wanted:
            response: Any = await admin.create_topics(wanted)
            for name, code, *_ in response.topic_errors:
                if code == _TOPIC_REFUSED:
                    raise refused(settings, OPS_TOPICS, for_code(code)())
                if code not in (_OK, _EXISTS):  # exists: another process won the race
                    raise CommandFailed(f"creating {name}: {for_code(code).__name__}")
            created = {t.name: t.num_partitions for t in wanted}
        for row in rows:
            row["action"] = "created" if row["topic"] in created else "exists"
            if row["topic"] in created:
                row["partitions"], row["exists"] = created[row["topic"]], True
        return rows


async def add_partitions(settings: KafkaSettings, topic: Topic, total: int) -> dict[str, Any]:
    """Raise ``topic``'s partitions to ``total`` (never fewer: Kafka cannot remove one)."""
    name = settings.topic_prefix + topic.value
    async with admin_client(settings, OPS_TOPICS) as admin:
        row = next(r for r in await _described(admin, settings) if r["topic"] == name)
        if not row["exists"]:
            raise CommandFailed(f"no topic {name} (run `weft topics ensure` first)")
        before = int(row["partitions"])
        if total <= before:
            raise CommandFailed(
                f"{name} has {before} partitions already; Kafka can only add partitions "
                f"(asked for {total} in all)",
                ExitCode.FAILED,
            )
        await admin.create_partitions({name: NewPartitions(total_count=total)})
        return {"topic": name, "partitions_before": before, "partitions": total}
