"""Session notices into the session's stream: ``weft.session.notices.v1``
(``suggestions_ready``, ``approval_escalated``, ``knowledge_progress``) appended to the
same Redis Stream as the agent events, so an SSE client following the session gets its
follow-ups, escalations and wiki/graph progress without polling (SPEC Q-01, ARCHITECTURE
"Topics": the projector copies notices "with their own ids").

**Ids.** An agent event's entry id is its ``agent.events`` log position, ``{offset+1}-0``
(``streams``). A notice is on another topic, so it has no position there: it takes the
successor of the stream's newest entry, ``{ms}-{n+1}``. Its sequence part is never 0, so
it can never take an id an agent event has or will have; it sorts after the events that
were in the stream when it came and before any later event (whose ``offset+1`` is larger
than ``ms``). A ``Last-Event-ID`` that names a notice therefore resumes exactly after it.

**Order.** A ``suggestions_ready`` is published after its turn's ``complete`` reached the
suggestions service, but the projector of ``agent.events`` may lag behind: the append waits
(up to ``wait_s``) while the stream has the turn but not yet its ``complete``, so the notice
lands after it. A turn the stream does not have (expired) does not wait, nor does an
``approval_escalated`` (its turn waits for a person, so it has no ``complete`` yet) or a
``knowledge_progress`` (it follows a document, not a turn).

**Redis lost.** The projector rebuilds the agent events from the log under their own ids
(``StreamProjector``); notices are not rebuilt (their topic is not replayed). Ids stay
comparable: a client resuming from a notice's id gets the events after it, nothing twice;
the follow-ups themselves stay readable through ``GET .../suggestions``.

**Duplicates.** A redelivered notice is skipped: the stream's turn hash remembers each
notice id it appended (``notice:<id>``), next to the turns' last ``seq``.

Records are checked like every consumer's (``RecordCheck``): a notice without a credential,
with another tenant's or session's, or a service credential without the scope
``records:weft.session.notices.v1`` is dead-lettered, never projected.
"""

from __future__ import annotations

import asyncio
import time
from enum import IntEnum

import structlog
from redis.asyncio import Redis
from redis.exceptions import NoScriptError
from weft_contracts import ApprovalEscalated, KnowledgeProgress, SuggestionsReady, Topic
from weft_platform.bus import EventBus

from weft_gateway.streams import client_json, stream_key

log = structlog.get_logger(__name__)

NOTICES_GROUP = "weft-gateway-notices"

Notice = SuggestionsReady | ApprovalEscalated | KnowledgeProgress
"""What the notices group projects (``weft_contracts.SessionNotice``)."""

# KEYS: stream, its turn hash. ARGV: notice id, request id, type, JSON, max length,
# retention, force ('1': do not wait for the turn's complete).
_APPEND_NOTICE = """
if redis.call('HEXISTS', KEYS[2], 'notice:' .. ARGV[1]) == 1 then return 0 end
if ARGV[7] ~= '1' and ARGV[2] ~= '' and redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1
   and redis.call('HEXISTS', KEYS[2], 'done:' .. ARGV[2]) == 0 then return -1 end
local id = '0-1'
local newest = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1]
if newest then
  local ms, n = string.match(newest[1], '^(%d+)-(%d+)$')
  id = ms .. '-' .. string.format('%d', n + 1)
end
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[5], id,
           'request_id', ARGV[2], 'seq', '0', 'type', ARGV[3], 'event', ARGV[4])
redis.call('HSET', KEYS[2], 'notice:' .. ARGV[1], id)
redis.call('EXPIRE', KEYS[1], ARGV[6])
redis.call('EXPIRE', KEYS[2], ARGV[6])
return 1
"""


class NoticeAppended(IntEnum):
    """What one append did."""

    TURN_RUNNING = -1
    """Nothing yet: the stream has the turn but not its ``complete``."""
    KNOWN = 0
    """Nothing: this notice is in the stream already (a redelivery)."""
    WRITTEN = 1


class NoticeProjector:
    """The handler of the gateway's notices group."""

    def __init__(
        self,
        redis: Redis,
        *,
        max_len: int,
        retention_s: int,
        wait_s: float = 5.0,
        poll_s: float = 0.05,
    ):
        self._redis = redis
        self._max_len = max_len
        self._retention = retention_s
        self._wait_s = wait_s
        self._poll_s = poll_s
        self._script = redis.register_script(_APPEND_NOTICE)

    async def handle(self, notice: Notice) -> None:
        """Append ``notice`` to its session's stream, a turn's follow-ups after its
        ``complete``. Raises when Redis fails: the bus hands the record back to Kafka."""
        if not isinstance(notice, SuggestionsReady):
            # An escalation is about a turn that is waiting (it has no complete yet), a
            # knowledge progress about a document: either goes in at once.
            await self.append(notice, force=True)
            return
        deadline = time.monotonic() + self._wait_s
        while True:
            force = time.monotonic() >= deadline
            done = await self.append(notice, force=force)
            if done is not NoticeAppended.TURN_RUNNING:
                return
            await asyncio.sleep(self._poll_s)

    async def append(self, notice: Notice, *, force: bool = False) -> NoticeAppended:
        """One append attempt."""
        key = stream_key(notice.tenant_id, notice.session_id)
        args: list[str | int] = [
            notice.id, notice.request_id or "", notice.type, client_json(notice),
            self._max_len, self._retention, "1" if force else "0",
        ]  # fmt: skip
        try:
            result = await self._redis.evalsha(self._script.sha, 2, key, key + ":seq", *args)
        except NoScriptError:
            await self._redis.script_load(_APPEND_NOTICE)
            result = await self._redis.evalsha(self._script.sha, 2, key, key + ":seq", *args)
        appended = NoticeAppended(int(result))
        if appended is NoticeAppended.WRITTEN:
            log.info("notice_projected", id=notice.id, type=notice.type)
        return appended


def register_notice_projector(
    bus: EventBus, redis: Redis, *, max_len: int, retention_s: int
) -> None:
    """Subscribe the notices group (one record at a time: notices are few; the bus checks
    each record's credential and de-duplicates by id before the handler)."""
    projector = NoticeProjector(redis, max_len=max_len, retention_s=retention_s)
    bus.consume(Topic.SESSION_NOTICES, NOTICES_GROUP, projector.handle)
