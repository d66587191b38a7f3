"""Create Weft's Kafka topics explicitly (``python -m weft_platform.topics ensure``), and
delete a prefixed set of them (``delete --prefix P``: test and benchmark stacks remove
theirs, so a long-lived local broker does not pile up thousands of partitions to load at
every start).

Topics are never auto-created: partition counts are a deployment decision
(``WEFT_TOPIC_PARTITIONS``, default 6; ``WEFT_TOPIC_PARTITIONS_<NAME>`` per topic, e.g.
``WEFT_TOPIC_PARTITIONS_TOOL_CALLS=12``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, TopicAlreadyExistsError
from weft_contracts import Topic


def partitions_for(topic: Topic, env: dict[str, str]) -> int:
    """Partition count for one topic from the environment."""
    specific = env.get(f"WEFT_TOPIC_PARTITIONS_{topic.name}")
    return int(specific or env.get("WEFT_TOPIC_PARTITIONS", "6"))


async def ensure_topics(
    bootstrap: str, env: dict[str, str], wait_s: float = 90.0, prefix: str = ""
) -> list[str]:
    """Create missing topics; return the names created. Waits for the broker up to wait_s."""
    admin = await _connect_admin(bootstrap, wait_s)
    try:
        existing = set(await admin.list_topics())
        missing = [
            NewTopic(
                name=prefix + t.value, num_partitions=partitions_for(t, env), replication_factor=1
            )
            for t in Topic
            if prefix + t.value not in existing
        ]
        if missing:
            # another process may create them between list and create
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(missing)
        return [t.name for t in missing]
    finally:
        await admin.close()


async def delete_topics(bootstrap: str, prefix: str, wait_s: float = 30.0) -> list[str]:
    """Delete the topics of the deployment named by ``prefix``; return the names deleted.
    Refuses an empty prefix: this is for the isolated stacks of tests and benchmarks, never
    for a deployment's own topics."""
    if not prefix:
        raise ValueError("delete_topics needs a prefix (it never deletes unprefixed topics)")
    admin = await _connect_admin(bootstrap, wait_s)
    try:
        names = {prefix + t.value for t in Topic} & set(await admin.list_topics())
        if names:
            await admin.delete_topics(sorted(names))
        return sorted(names)
    finally:
        await admin.close()


async def _connect_admin(bootstrap: str, wait_s: float) -> AIOKafkaAdminClient:
    deadline = time.monotonic() + wait_s
    while True:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
        try:
            await admin.start()
            await admin.describe_cluster()
            return admin
        except (KafkaConnectionError, OSError) as exc:
            await admin.close()
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kafka at {bootstrap} not reachable: {exc}") from exc
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
    if args.command == "delete":
        deleted = asyncio.run(delete_topics(args.bootstrap, args.prefix, args.wait))
        print(f"{len(deleted)} topics deleted")
        return 0
    created = asyncio.run(ensure_topics(args.bootstrap, dict(os.environ), args.wait, args.prefix))
    print(f"topics ready ({len(created)} created: {', '.join(created) or 'none'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
