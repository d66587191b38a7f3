"""Who may read and write what on Kafka: the one table of principals, topics and consumer
groups (:data:`ACCESS`), and the ACLs the topics job makes of it.

Each service connects as its own SCRAM principal (``WEFT_KAFKA_USERNAME``); the broker's
``StandardAuthorizer`` refuses whatever this table does not grant (ARCHITECTURE, "Topics",
and invariant 5). ``docs/security.md`` shows the table as :func:`markdown_table` renders it
(a unit test keeps them equal). Names are the deployment's: a topic prefix (test stacks)
prefixes every topic and group the ACLs name.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.admin import (
    CreateAclsRequest_v0,
    CreateAclsRequest_v1,
    DeleteAclsRequest_v0,
    DeleteAclsRequest_v1,
    DescribeAclsRequest,
)
from aiokafka.protocol.api import Request
from weft_contracts import Topic

SESSION_NOTICES = Topic.SESSION_NOTICES.value
"""Session events that are not a turn's (ARCHITECTURE)."""

DLQ_REPLAY = "weft-dlq-replay"
"""The principal that reads dead letters and puts them back on their topic: separate from
every service, so that no service can read what others dead-lettered."""

OPS_LAG = "weft-ops-lag"
"""The principal of ``weft lag``: describes the deployment's topics and consumer groups
(end offsets, committed offsets), and reads no record and writes nothing."""

OPS_TOPICS = "weft-ops-topics"
"""The principal of ``weft topics``: creates the deployment's topics, adds partitions to
them and describes them; it reads and writes no record and touches no group."""

SUPER_USER = "weft-admin"
"""The broker's super user: the topics job (creates topics and these ACLs) and tests'
inspection clients. No service runs as it."""

_EVERY_WRITER_TOPIC = Topic.DLQ.value


@dataclass(frozen=True, slots=True)
class Access:
    """What one principal may do: produce to ``writes``, consume ``reads`` (with or without
    a group), and join the consumer ``groups``. The operators' tools get narrower rights
    on top: ``describes`` (a topic's partitions and offsets, no record), ``creates`` and
    ``alters`` (create a topic, add partitions to it) and ``describe_groups`` (a group's
    members and committed offsets, without joining it)."""

    writes: frozenset[str] = field(default_factory=frozenset)
    reads: frozenset[str] = field(default_factory=frozenset)
    groups: frozenset[str] = field(default_factory=frozenset)
    describes: frozenset[str] = field(default_factory=frozenset)
    creates: frozenset[str] = field(default_factory=frozenset)
    alters: frozenset[str] = field(default_factory=frozenset)
    describe_groups: frozenset[str] = field(default_factory=frozenset)


def _access(
    writes: Iterable[str] = (), reads: Iterable[str] = (), groups: Iterable[str] = ()
) -> Access:
    # Every service may dead-letter what it could not handle (ARCHITECTURE, "Topics").
    return Access(frozenset([*writes, _EVERY_WRITER_TOPIC]), frozenset(reads), frozenset(groups))


_EVERY_TOPIC = frozenset(t.value for t in Topic)
CONSUMER_GROUPS = frozenset(
    [
        "weft-gateway-projector",
        "weft-gateway-notices",
        "weft-engine",
        "weft-engine-results",
        "weft-engine-control",
        "weft-tool-exec",
        "weft-sandbox",
        "weft-memory",
        "weft-suggestions",
        DLQ_REPLAY,
    ]
)
"""Every consumer group of the table (a unit test keeps the two lists equal): what
``weft lag`` reports on."""

ACCESS: dict[str, Access] = {
    "weft-gateway": _access(
        writes=[Topic.AGENT_REQUESTS, Topic.AGENT_CONTROL],
        reads=[Topic.AGENT_EVENTS, SESSION_NOTICES],
        groups=["weft-gateway-projector", "weft-gateway-notices"],
    ),
    "weft-agent-config": _access(),
    "weft-engine": _access(
        writes=[Topic.AGENT_EVENTS, Topic.TOOL_CALLS, Topic.SANDBOX_CALLS, SESSION_NOTICES],
        # agent.events: a takeover and the auditor read a turn's events back (no group).
        reads=[Topic.AGENT_REQUESTS, Topic.AGENT_CONTROL, Topic.TOOL_RESULTS, Topic.AGENT_EVENTS],
        groups=["weft-engine", "weft-engine-results", "weft-engine-control"],
    ),
    "weft-tool-exec": _access(
        writes=[Topic.TOOL_RESULTS],
        # agent.events: each worker follows turn ends (no group) to clean up after them.
        reads=[Topic.TOOL_CALLS, Topic.AGENT_EVENTS],
        groups=["weft-tool-exec"],
    ),
    "weft-sandbox": _access(
        writes=[Topic.TOOL_RESULTS], reads=[Topic.SANDBOX_CALLS], groups=["weft-sandbox"]
    ),
    # agent.control: approval expiries; session.notices: approval escalations.
    "weft-memory": _access(
        writes=[Topic.AGENT_CONTROL, SESSION_NOTICES],
        reads=[Topic.AGENT_EVENTS],
        groups=["weft-memory"],
    ),
    "weft-suggestions": _access(
        writes=[SESSION_NOTICES], reads=[Topic.AGENT_EVENTS], groups=["weft-suggestions"]
    ),
    # session.notices: ingestion progress of a document (its service and workers).
    "weft-knowledge": _access(writes=[SESSION_NOTICES]),
    # A replayed record goes back to the topic its consumer reads; never to agent.events,
    # whose only writer is the engine (it owns the per-turn seq).
    DLQ_REPLAY: Access(
        writes=frozenset(
            [
                Topic.AGENT_REQUESTS,
                Topic.AGENT_CONTROL,
                Topic.TOOL_CALLS,
                Topic.SANDBOX_CALLS,
                Topic.TOOL_RESULTS,
            ]
        ),
        reads=frozenset([Topic.DLQ]),
        groups=frozenset([DLQ_REPLAY]),
    ),
    OPS_LAG: Access(describes=_EVERY_TOPIC, describe_groups=CONSUMER_GROUPS),
    OPS_TOPICS: Access(describes=_EVERY_TOPIC, creates=_EVERY_TOPIC, alters=_EVERY_TOPIC),
}
"""Principal -> what it may do. Every principal not listed here (and every anonymous
client) is refused everything but the super user's."""

SERVICE_PRINCIPALS: dict[str, str] = {
    "gateway": "weft-gateway",
    "agent_config": "weft-agent-config",
    "engine": "weft-engine",
    "tool_exec": "weft-tool-exec",
    "sandbox": "weft-sandbox",
    "memory": "weft-memory",
    "suggestions": "weft-suggestions",
    "knowledge": "weft-knowledge",
}
"""Service (its package name without ``weft_``) -> the principal it connects as."""


class _Resource(IntEnum):
    TOPIC = 2
    GROUP = 3


class _Operation(IntEnum):
    ANY = 1
    READ = 3
    WRITE = 4
    CREATE = 5
    ALTER = 7
    DESCRIBE = 8


_ANY_RESOURCE = 1
_LITERAL = 3
_ANY_PATTERN = 1
_ALLOW = 3
_ANY_PERMISSION = 1
_SECURITY_DISABLED = 54


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """One ALLOW rule: ``principal`` may ``operation`` the literal resource ``name``."""

    principal: str
    resource: _Resource
    name: str
    operation: _Operation


def bindings(prefix: str = "") -> list[AclBinding]:
    """The ACLs of :data:`ACCESS` for the deployment whose names start with ``prefix``.
    READ and WRITE each imply DESCRIBE, which metadata requests need; DESCRIBE alone (the
    operators' tools) shows offsets and partitions but no record."""
    out: set[AclBinding] = set()
    for principal, access in ACCESS.items():
        for topic in access.writes:
            out.add(AclBinding(principal, _Resource.TOPIC, prefix + topic, _Operation.WRITE))
        for topic in access.reads:
            out.add(AclBinding(principal, _Resource.TOPIC, prefix + topic, _Operation.READ))
        for group in access.groups:
            out.add(AclBinding(principal, _Resource.GROUP, prefix + group, _Operation.READ))
        for names, kind, operation in (
            (access.describes, _Resource.TOPIC, _Operation.DESCRIBE),
            (access.creates, _Resource.TOPIC, _Operation.CREATE),
            (access.alters, _Resource.TOPIC, _Operation.ALTER),
            (access.describe_groups, _Resource.GROUP, _Operation.DESCRIBE),
        ):
            out.update(AclBinding(principal, kind, prefix + name, operation) for name in names)
    return sorted(out)


class AuthorizerMissing(RuntimeError):
    """The broker runs without an authorizer: it grants everything, and ACLs mean nothing."""


class _CreateAcls(Request[CreateAclsRequest_v0 | CreateAclsRequest_v1]):  # type: ignore[misc]
    """CreateAcls with many creations in one request (aiokafka's own sends one)."""

    API_KEY = 30

    def __init__(self, acls: Sequence[AclBinding]):
        self._acls = acls

    def build(
        self, request_struct_class: type[CreateAclsRequest_v0 | CreateAclsRequest_v1]
    ) -> CreateAclsRequest_v0 | CreateAclsRequest_v1:
        if request_struct_class.API_VERSION < 1:
            return request_struct_class(
                [(a.resource, a.name, f"User:{a.principal}", "*", a.operation, _ALLOW)
                 for a in self._acls]
            )  # fmt: skip
        return request_struct_class(
            [(a.resource, a.name, _LITERAL, f"User:{a.principal}", "*", a.operation, _ALLOW)
             for a in self._acls]
        )  # fmt: skip


_Filter = tuple[_Resource, str, str | None, _Operation]
"""What DeleteAcls removes: rules on a literal resource, of one principal (None: any),
for one operation (ANY: all of them)."""


class _DeleteAcls(Request[DeleteAclsRequest_v0 | DeleteAclsRequest_v1]):  # type: ignore[misc]
    """DeleteAcls of the rules matching each filter."""

    API_KEY = 31

    def __init__(self, filters: Sequence[_Filter]):
        self._filters = [
            (kind, name, None if who is None else f"User:{who}", None if who is None else "*", op)
            for kind, name, who, op in filters
        ]

    def build(
        self, request_struct_class: type[DeleteAclsRequest_v0 | DeleteAclsRequest_v1]
    ) -> DeleteAclsRequest_v0 | DeleteAclsRequest_v1:
        if request_struct_class.API_VERSION < 1:
            return request_struct_class(
                [(kind, name, who, host, op, _ANY_PERMISSION)
                 for kind, name, who, host, op in self._filters]
            )  # fmt: skip
        return request_struct_class(
            [(kind, name, _LITERAL, who, host, op, _ANY_PERMISSION)
             for kind, name, who, host, op in self._filters]
        )  # fmt: skip


async def create_acls(admin: AIOKafkaAdminClient, prefix: str = "", wait_s: float = 30.0) -> int:
    """Make the read and write rules on the deployment's topics and groups exactly those of
    :func:`bindings`: create the missing ones (creating an existing one is a no-op), delete
    the ones the table no longer grants, and wait until the broker enforces that; return
    how many rules there are. :class:`AuthorizerMissing` when the broker has no authorizer."""
    acls = bindings(prefix)
    response: Any = await admin._send_request(_CreateAcls(acls))
    errors = [(code, msg) for code, msg in response.creation_responses if code]
    if any(code == _SECURITY_DISABLED for code, _ in errors):
        raise AuthorizerMissing("the broker has no authorizer: ACLs were not created")
    if errors:
        raise RuntimeError(f"ACLs refused by the broker: {errors[:3]}")
    wanted = set(acls)
    ours = {(a.resource, a.name) for a in acls}
    stale = {a for a in await _listed(admin) if (a.resource, a.name) in ours} - wanted
    if stale:
        filters = [(a.resource, a.name, a.principal, a.operation) for a in sorted(stale)]
        await _delete(admin, filters)
    await _until_enforced(admin, wanted, stale, wait_s)
    return len(acls)


async def _delete(admin: AIOKafkaAdminClient, filters: Sequence[_Filter]) -> None:
    response: Any = await admin._send_request(_DeleteAcls(filters))
    codes = {row[0] for row in response.filter_responses} - {0}
    if codes - {_SECURITY_DISABLED}:
        raise RuntimeError(f"ACLs not deleted: error codes {sorted(codes)}")


async def _until_enforced(
    admin: AIOKafkaAdminClient, wanted: set[AclBinding], gone: set[AclBinding], wait_s: float
) -> None:
    """The controller has the new ACLs once CreateAcls answers; the broker's authorizer
    applies them from the metadata log a moment later. A service started in between would
    be refused, so wait until the broker lists them all."""
    deadline = time.monotonic() + wait_s
    while True:
        listed = await _listed(admin)
        missing = (wanted - listed) | (gone & listed)
        if not missing:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{len(missing)} ACLs not in force after {wait_s}s, e.g. {min(missing)}"
            )
        await asyncio.sleep(0.1)


_GRANTED = frozenset(op.value for op in _Operation if op is not _Operation.ANY)
"""The operations the table grants (what :func:`_listed` reports)."""


async def _listed(admin: AIOKafkaAdminClient) -> set[AclBinding]:
    """Every literal ALLOW rule on topics and groups the broker enforces."""
    request = DescribeAclsRequest(
        _ANY_RESOURCE, None, _LITERAL, None, None, _Operation.ANY, _ANY_PERMISSION
    )
    response: Any = await admin._send_request(request)
    if response.error_code:
        raise RuntimeError(f"DescribeAcls failed: {response.error_code} {response.error_message}")
    listed: set[AclBinding] = set()
    for kind, name, _pattern, rules in response.resources:
        if kind not in (_Resource.TOPIC, _Resource.GROUP):
            continue
        for principal, _host, operation, permission in rules:
            if permission == _ALLOW and operation in _GRANTED:
                user = principal.removeprefix("User:")
                listed.add(AclBinding(user, _Resource(kind), name, _Operation(operation)))
    return listed


async def delete_acls(admin: AIOKafkaAdminClient, prefix: str) -> None:
    """Delete every ACL on the topics and groups of the deployment named by ``prefix``."""
    resources = sorted({(a.resource, a.name) for a in bindings(prefix)})
    await _delete(admin, [(kind, name, None, _Operation.ANY) for kind, name in resources])


def markdown_table() -> str:
    """:data:`ACCESS` as the Markdown table of ``docs/security.md``: R read, W write,
    D describe only, C create, A alter (add partitions)."""
    topics = sorted({*(t.value for t in Topic), SESSION_NOTICES})
    rows = ["| principal | " + " | ".join(f"`{t}`" for t in topics) + " | consumer groups |"]
    rows.append("|---" * (len(topics) + 2) + "|")
    for principal, access in ACCESS.items():
        cells = [_topic_cell(access, topic) for topic in topics]
        groups = ", ".join(f"`{g}`" for g in sorted(access.groups))
        if access.describe_groups:
            described = f"describe only: {len(access.describe_groups)} groups (every one above)"
            groups = f"{groups}; {described}" if groups else described
        rows.append(f"| `{principal}` | " + " | ".join(cells) + f" | {groups or '-'} |")
    return "\n".join(rows)


def _topic_cell(access: Access, topic: str) -> str:
    rights = (
        ("R", topic in access.reads),
        ("W", topic in access.writes),
        ("D", topic in access.describes and topic not in access.reads | access.writes),
        ("C", topic in access.creates),
        ("A", topic in access.alters),
    )
    return "".join(letter for letter, has in rights if has) or "-"
