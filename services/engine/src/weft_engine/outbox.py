"""The turn's outbox: events whose ``seq`` a state write reserved, kept in Redis with the
state until Kafka acknowledged them (invariant 1, SPEC E-18).

A round's results can be recorded on two replicas (``tool.results`` is keyed by call id).
A replica that dies between recording a result (state and seqs in one write) and
publishing its events would leave a hole in the turn's seqs, and the projector drops an
event whose seq is not above its turn's last one, so a late publish is no repair. So the
recording write also stores the events (``outbox_key``: a hash, seq to envelope JSON) and
names their publisher, the *holder* (``outbox_holder_key``, an ``EventEmitter``'s id with
a short expiry). Every script that reserves seqs for an emitter first looks at both
(``OUTBOX_GUARD``):

* another live holder: it is publishing earlier seqs now; wait for it (:data:`BUSY`);
* entries and no holder: a dead holder's; publish them first, at their seqs, in seq
  order (:data:`ORPHANED`, ``EventEmitter.drain``);
* the emitter's own entries: already queued on its producer, ahead of what it queues
  next; go on.

Once Kafka acked them the holder removes its entries and lets go (``SETTLE``). A holder
slower than ``HOLD_MS`` may see its entries published a second time by the next one:
the same envelope (id and seq) twice, which the projector drops by seq and consumers by id.
"""

from __future__ import annotations

from dataclasses import dataclass

HOLD_MS = 5000
"""How long a holder is trusted to get its entries acked (a Kafka ack takes milliseconds;
past this it counts as dead). The wait of whoever touches the turn after a dead holder."""

BUSY = -2
"""A reserving script's answer: another holder is publishing earlier seqs of the turn."""
ORPHANED = -3
"""A reserving script's answer: a dead holder left entries; publish them first."""

# outbox_guard(box, holder, me): 0 when `me` may reserve seqs, else BUSY or ORPHANED.
OUTBOX_GUARD = """
local function outbox_guard(box, holder, me)
  local current = redis.call('GET', holder)
  if current then
    if current == me then return 0 end
    return -2
  end
  if redis.call('EXISTS', box) == 1 then return -3 end
  return 0
end
"""

# Take a dead holder's entries (KEYS: box, holder; ARGV: me, hold ms): false while another
# holder holds the turn; else its entries as a flat [seq, json, ...] list (empty: none, or
# they are this emitter's own), the turn held by `me` while it publishes them.
TAKE_ORPHANS = """
local current = redis.call('GET', KEYS[2])
if current and current ~= ARGV[1] then return false end
if current then return {} end
local entries = redis.call('HGETALL', KEYS[1])
if #entries > 0 then redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2]) end
return entries
"""

# Kafka acked the entries at seqs ARGV[2..] (KEYS: box, holder; ARGV[1]: me): remove them,
# and let go of the turn once it holds no entry of ours.
SETTLE = """
for i = 2, #ARGV do redis.call('HDEL', KEYS[1], ARGV[i]) end
if redis.call('GET', KEYS[2]) == ARGV[1] and redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[2])
end
return 1
"""

# Publishing failed (KEYS: box, holder; ARGV[1]: me): let go at once, so the next one to
# reserve a seq publishes the entries instead of waiting out the hold.
LET_GO = """
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
return 1
"""


@dataclass(frozen=True)
class OutboxWrite:
    """What a state write that reserves seqs stores in the outbox (``TurnStore``)."""

    holder: str
    """The emitter that publishes the entries."""
    entries: list[str]
    """Envelope JSON of each event (at seq 0), in the order of the reserved seqs."""
    hold_ms: int = HOLD_MS


class SeqsHeld(Exception):
    """The turn's seqs cannot be reserved yet: earlier ones are still to be published (by a
    live holder, or from a dead one's outbox)."""

    def __init__(self, request_id: str, code: int):
        super().__init__(request_id)
        self.request_id = request_id
        self.orphaned = code == ORPHANED


def entries_by_seq(flat: list[bytes]) -> list[tuple[int, bytes]]:
    """A ``TAKE_ORPHANS`` answer as (seq, envelope JSON) pairs in seq order."""
    pairs = [(int(flat[i]), flat[i + 1]) for i in range(0, len(flat), 2)]
    return sorted(pairs)
