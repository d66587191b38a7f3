"""Create Weft's Kafka topics explicitly (``python -m weft_platform.topics ensure``), and
delete a prefixed set of them (``delete --prefix P``: test and benchmark stacks remove
theirs, so a long-lived local broker does not pile up thousands of partitions to load at
every start).

Topics are never auto-created: partition counts are a deployment decision
(``WEFT_TOPIC_PARTITIONS``, default 6; ``WEFT_TOPIC_PARTITIONS_<NAME>`` per topic, e.g.
``WEFT_TOPIC_PARTITIONS_TOOL_CALLS=12``), and so is their durability: every new topic gets
``WEFT_TOPIC_REPLICATION_FACTOR`` replicas and ``min.insync.replicas`` of
``WEFT_TOPIC_MIN_INSYNC_REPLICAS`` (local broker 1/1; production 3/2, so that an ``acks=all``
write survives one broker's loss), and their ``retention.ms`` (``WEFT_TOPIC_RETENTION_MS``,
per topic ``WEFT_TOPIC_RETENTION_MS_<NAME>``; unset: the broker's). Topics that exist
already keep theirs.

``ensure`` also makes the ACLs on the deployment's topics and consumer groups those of
``weft_platform.kafka_acls`` (missing rules created, rules the table dropped deleted),
unless the broker has no authorizer (it says so); ``delete``
removes them with the topics. Both connect as ``WEFT_KAFKA_USERNAME``, which must be the
broker's super user when ACLs are on.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, TopicAlreadyExistsError
from weft_contracts import Topic

from weft_platform.kafka_acls import AuthorizerMissing, create_acls, delete_acls
from weft_platform.settings import KafkaAccess


def partitions_for(topic: Topic, env: dict[str, str]) -> int:
    """Partition count for one topic from the environment."""
    specific = env.get(f"WEFT_TOPIC_PARTITIONS_{topic.name}")
    return int(specific or env.get("WEFT_TOPIC_PARTITIONS", "6"))


def durability_for(env: dict[str, str]) -> tuple[int, int]:
    """Replication factor and ``min.insync.replicas`` of new topics, from the environment."""
    replicas = int(env.get("WEFT_TOPIC_REPLICATION_FACTOR", "1"))
    in_sync = int(env.get("WEFT_TOPIC_MIN_INSYNC_REPLICAS", "1"))
    if not 1 <= in_sync <= replicas:
        raise ValueError(
            f"WEFT_TOPIC_MIN_INSYNC_REPLICAS={in_sync} must be between 1 and "
            f"WEFT_TOPIC_REPLICATION_FACTOR={replicas}"
        )
    return replicas, in_sync


def retention_for(topic: Topic, env: dict[str, str]) -> int | None:
    """``retention.ms`` of a new topic: ``WEFT_TOPIC_RETENTION_MS_<NAME>``, else
    ``WEFT_TOPIC_RETENTION_MS``, else None (the broker's default). -1 keeps records forever."""
    raw = env.get(f"WEFT_TOPIC_RETENTION_MS_{topic.name}") or env.get("WEFT_TOPIC_RETENTION_MS")
    if not raw:
        return None
    value = int(raw)
    if value < -1:
        raise ValueError(f"retention of {topic.name}: {value} ms (expected -1 or more)")
    return value


def new_topics(names: list[Topic], env: dict[str, str], prefix: str = "") -> list[NewTopic]:
    """How the topics job creates ``names``: partitions, durability and retention from
    ``env``."""
    replicas, in_sync = durability_for(env)
    out = []
    for t in names:
        configs = {"min.insync.replicas": str(in_sync)}
        retention = retention_for(t, env)
        if retention is not None:
            configs["retention.ms"] = str(retention)
        out.append(
            NewTopic(
                name=prefix + t.value,
                num_partitions=partitions_for(t, env),
                replication_factor=replicas,
                topic_configs=configs,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class Ensured:
    """What ``ensure`` did: the topics it created, and the ACLs it made (None: the broker
    has no authorizer, so none were made)."""

    created: list[str]
    acls: int | None


async def ensure_topics(
    access: KafkaAccess, env: dict[str, str], wait_s: float = 90.0, prefix: str = ""
) -> Ensured:
    """Create missing topics and the deployment's ACLs. Waits for the broker up to wait_s."""
    admin = await _connect_admin(access, wait_s)
    try:
        existing = set(await admin.list_topics())
        missing = new_topics([t for t in Topic if prefix + t.value not in existing], env, prefix)
        if missing:
            # another process may create them between list and create
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(missing)
        try:
            acls: int | None = await create_acls(admin, prefix)
        except AuthorizerMissing:
            acls = None
        return Ensured([t.name for t in missing], acls)
    finally:
        await admin.close()


async def delete_topics(access: KafkaAccess, prefix: str, wait_s: float = 30.0) -> list[str]:
    """Delete the topics of the deployment named by ``prefix``; return the names deleted.
    Refuses an empty prefix: this is for the isolated stacks of tests and benchmarks, never
    for a deployment's own topics."""
    if not prefix:
        raise ValueError("delete_topics needs a prefix (it never deletes unprefixed topics)")
    admin = await _connect_admin(access, wait_s)
    try:
        names = {prefix + t.value for t in Topic} & set(await admin.list_topics())
        if names:
            await admin.delete_topics(sorted(names))
        await delete_acls(admin, prefix)
        return sorted(names)
    finally:
        await admin.close()


async def _connect_admin(access: KafkaAccess, wait_s: float) -> AIOKafkaAdminClient:
    deadline = time.monotonic() + wait_s
    while True:
        admin = AIOKafkaAdminClient(**access.client_options(), request_timeout_ms=10_000)
        try:
            await admin.start()
            await admin.describe_cluster()
            return admin
        except (KafkaConnectionError, OSError) as exc:
            await admin.close()
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"Kafka at {access.kafka_bootstrap} not reachable: {exc}"
                ) from exc
            await asyncio.sleep(1.0)


def main() -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=["ensure", "delete"])
    parser.add_argument(
        "--bootstrap", default=os.environ.get("WEFT_KAFKA_BOOTSTRAP", "127.0.0.1:19092")
    )
    parser.add_argument("--wait", type=float, default=90.0)
    parser.add_argument("--prefix", default=os.environ.get("WEFT_TOPIC_PREFIX", ""))
    args = parser.parse_args()
    access = KafkaAccess(kafka_bootstrap=args.bootstrap)
    if args.command == "delete":
        deleted = asyncio.run(delete_topics(access, args.prefix, args.wait))
        print(f"{len(deleted)} topics deleted")
        return 0
    done = asyncio.run(ensure_topics(access, dict(os.environ), args.wait, args.prefix))
    acls = "no ACLs: the broker has no authorizer" if done.acls is None else f"{done.acls} ACLs"
    names = ", ".join(done.created) or "none"
    print(f"topics ready ({len(done.created)} created: {names}; {acls})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
