"""The broker, not the services, decides who writes and reads what (ARCHITECTURE invariant 5,
docs/security.md "Kafka"): against a SASL/SCRAM broker with the ``StandardAuthorizer`` and
the ACLs the topics job makes of ``weft_platform.kafka_acls.ACCESS``.

The broker is the infrastructure's when it takes SASL logins (``make infra-up`` formats it
so by default), otherwise a private one formatted with SASL for this module.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    TopicAuthorizationFailedError,
)
from pydantic import SecretStr
from weft_contracts import Topic
from weft_platform.kafka_acls import (
    ACCESS,
    DLQ_REPLAY,
    SERVICE_PRINCIPALS,
    SUPER_USER,
    AclBinding,
    _CreateAcls,
    _Operation,
    _Resource,
    _until_enforced,
)
from weft_platform.settings import KafkaAccess
from weft_platform.topics import delete_topics, ensure_topics
from weft_testkit import infra_env
from weft_testkit.kafka import kafka_users
from weft_testkit.stack import free_port

from tests.private_broker import PrivateBroker

SERVICES = list(SERVICE_PRINCIPALS.values())
"""The services' principals (the replay identity and the operators' tools are not)."""


@dataclass(frozen=True)
class SaslBroker:
    """A SASL broker and its users' passwords."""

    bootstrap: str
    users: dict[str, str]

    def login(self, principal: str, password: str | None = None) -> KafkaAccess:
        """The settings of a client logged in as ``principal``."""
        return KafkaAccess(
            kafka_bootstrap=self.bootstrap,
            kafka_security_protocol="SASL_PLAINTEXT",
            kafka_username=principal,
            kafka_password=SecretStr(password or self.users[principal]),
        )


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    env = infra_env()
    if env.get("WEFT_KAFKA_SECURITY_PROTOCOL") == "SASL_PLAINTEXT":
        yield SaslBroker(env["WEFT_KAFKA_BOOTSTRAP"], kafka_users())
        return
    home = Path(tmp_path_factory.mktemp("sasl")) / "weft-home"
    private = PrivateBroker(home, free_port(), free_port(), security="sasl")
    private.infra("up")
    try:
        users = dict(line.split() for line in (home / "data/kafka-users").read_text().splitlines())
        yield SaslBroker(private.bootstrap, users)
    finally:
        private.infra("down")


@pytest.fixture
async def prefix(sasl_broker: SaslBroker) -> AsyncIterator[str]:
    """A deployment of its own: topics of one partition, with their ACLs."""
    mine = f"acl{secrets.token_hex(4)}."
    admin = sasl_broker.login(SUPER_USER)
    done = await ensure_topics(admin, {"WEFT_TOPIC_PARTITIONS": "1"}, prefix=mine)
    assert done.acls, "the broker must have an authorizer"
    try:
        yield mine
    finally:
        await delete_topics(admin, mine)


async def _write(access: KafkaAccess, topic: str) -> None:
    producer = AIOKafkaProducer(**access.client_options(), request_timeout_ms=10_000)
    try:
        await producer.start()
        await producer.send_and_wait(topic, b'{"probe": true}', key=b"k")
    finally:
        await producer.stop()


async def _read(access: KafkaAccess, topic: str, group: str | None) -> int:
    """Records read from the start of ``topic`` (in ``group``, or outside any group)."""
    consumer = AIOKafkaConsumer(
        topic, **access.client_options(), group_id=group, auto_offset_reset="earliest",
        request_timeout_ms=10_000,
    )  # fmt: skip
    try:
        await consumer.start()
        batches = await consumer.getmany(timeout_ms=5000)
        return sum(len(records) for records in batches.values())
    finally:
        await consumer.stop()


async def test_a_producer_without_credentials_is_refused(
    sasl_broker: SaslBroker, prefix: str
) -> None:
    dlq = prefix + Topic.DLQ
    with pytest.raises(KafkaConnectionError):
        await _write(KafkaAccess(kafka_bootstrap=sasl_broker.bootstrap), dlq)
    await _write(sasl_broker.login("weft-memory"), dlq)  # the same write, logged in


async def test_a_wrong_password_is_refused(sasl_broker: SaslBroker, prefix: str) -> None:
    dlq = prefix + Topic.DLQ
    with pytest.raises(KafkaConnectionError):
        await _write(
            sasl_broker.login("weft-engine", "not-" + sasl_broker.users["weft-engine"]), dlq
        )
    with pytest.raises(KafkaConnectionError):
        await _write(sasl_broker.login("someone", sasl_broker.users["weft-engine"]), dlq)


@pytest.mark.parametrize(
    ("principal", "topic"),
    [
        ("weft-memory", Topic.AGENT_REQUESTS),  # a forged ChatRequested
        ("weft-tool-exec", Topic.AGENT_EVENTS),  # only the engine writes a turn's events
        ("weft-gateway", Topic.TOOL_CALLS),
        ("weft-sandbox", Topic.AGENT_CONTROL),
        ("weft-suggestions", Topic.TOOL_RESULTS),
        ("weft-tool-exec", Topic.SESSION_NOTICES),  # ingestion notices are knowledge's now
        ("weft-knowledge", Topic.TOOL_CALLS),  # knowledge writes notices and dead letters only
        (DLQ_REPLAY, Topic.AGENT_EVENTS),
    ],
)
async def test_a_principal_writing_a_topic_it_does_not_own_is_refused(
    sasl_broker: SaslBroker, prefix: str, principal: str, topic: Topic
) -> None:
    with pytest.raises(TopicAuthorizationFailedError):
        await _write(sasl_broker.login(principal), prefix + topic)


async def test_reading_another_services_consumer_group_is_refused(
    sasl_broker: SaslBroker, prefix: str
) -> None:
    """memory may read agent.events, but not as the projector's or suggestions' group
    (which would take their partitions and offsets)."""
    memory = sasl_broker.login("weft-memory")
    events = prefix + Topic.AGENT_EVENTS
    for group in ("weft-gateway-projector", "weft-suggestions"):
        with pytest.raises(GroupAuthorizationFailedError):
            await _read(memory, events, prefix + group)
    assert await _read(memory, events, prefix + "weft-memory") == 0  # its own group works


async def test_the_dead_letter_topic_is_writable_by_every_service_and_read_by_replay_only(
    sasl_broker: SaslBroker, prefix: str
) -> None:
    dlq = prefix + Topic.DLQ
    for principal in SERVICES:
        await _write(sasl_broker.login(principal), dlq)
    replay = sasl_broker.login(DLQ_REPLAY)
    assert await _read(replay, dlq, prefix + DLQ_REPLAY) == len(SERVICES)
    with pytest.raises(TopicAuthorizationFailedError):
        await _read(sasl_broker.login("weft-memory"), dlq, prefix + "weft-memory")
    with pytest.raises(TopicAuthorizationFailedError):
        await _read(sasl_broker.login("weft-gateway"), dlq, None)


async def test_the_broker_enforces_exactly_the_table(sasl_broker: SaslBroker, prefix: str) -> None:
    """Every principal x existing topic: a write and a group-less read are allowed exactly
    when ``ACCESS`` grants them (a rule the topics job failed to create, or one too many,
    shows up here)."""
    wrong: list[str] = []
    for principal, access in ACCESS.items():
        login = sasl_broker.login(principal)
        for topic in Topic:
            for operation, granted, attempt in (
                ("write", topic in access.writes, _write(login, prefix + topic)),
                ("read", topic in access.reads, _read(login, prefix + topic, None)),
            ):
                try:
                    await attempt
                    allowed = True
                except TopicAuthorizationFailedError:
                    allowed = False
                if allowed != granted:
                    wrong.append(f"{principal} {operation} {topic}: {allowed=} {granted=}")
    assert not wrong, wrong


async def test_a_rule_the_table_does_not_grant_is_removed_by_the_topics_job(
    sasl_broker: SaslBroker, prefix: str
) -> None:
    """A grant dropped from the table (or added by hand) does not outlive the next
    ``topics ensure``."""
    admin_login = sasl_broker.login(SUPER_USER)
    requests = prefix + Topic.AGENT_REQUESTS
    extra = AclBinding("weft-memory", _Resource.TOPIC, requests, _Operation.WRITE)
    admin = AIOKafkaAdminClient(**admin_login.client_options())
    await admin.start()
    try:
        await admin._send_request(_CreateAcls([extra]))
        await _until_enforced(admin, {extra}, set(), 30)
    finally:
        await admin.close()
    await _write(sasl_broker.login("weft-memory"), requests)  # the extra rule works

    await ensure_topics(admin_login, {"WEFT_TOPIC_PARTITIONS": "1"}, prefix=prefix)
    with pytest.raises(TopicAuthorizationFailedError):
        await _write(sasl_broker.login("weft-memory"), requests)
