"""Redis keys of one turn, in one place: several of them are read by one script
(``TurnLeases.claim_step``) and written by different modules."""

from __future__ import annotations


def state_key(request_id: str) -> str:
    """The turn's ``TurnState`` JSON."""
    return f"weft:turn:{request_id}:state"


def version_key(request_id: str) -> str:
    """The version of the stored state (compare-and-set, ``TurnStore.save``)."""
    return f"weft:turn:{request_id}:version"


def seq_key(request_id: str) -> str:
    """Counter of the turn's event ``seq`` (invariant 1), shared by every replica."""
    return f"weft:turn:{request_id}:seq"


def cancel_key(request_id: str) -> str:
    """Flag set when the user stopped the turn."""
    return f"weft:turn:{request_id}:cancel"


def inbox_key(request_id: str) -> str:
    """List of the turn's waiting steer messages (SPEC E-13)."""
    return f"weft:turn:{request_id}:inbox"


def lease_key(request_id: str) -> str:
    """Which replica runs the turn's step now (``TurnLeases``)."""
    return f"weft:turn:{request_id}:lease"


def images_key(request_id: str) -> str:
    """Hash of the turn's data-URI images by digest (``ParkedImages``), out of its state."""
    return f"weft:turn:{request_id}:images"


def streaming_key(request_id: str) -> str:
    """The round whose text a replica is streaming now (``EventEmitter``): a takeover
    that finds it runs that round again (``TurnLoop._take_over``)."""
    return f"weft:turn:{request_id}:streaming"


def completed_key(request_id: str) -> str:
    """Flag set once the turn's ``complete`` is sent (SPEC E-04)."""
    return f"weft:turn:{request_id}:completed"


def takeovers_key(request_id: str) -> str:
    """How many times replicas took the turn over after another one stopped."""
    return f"weft:turn:{request_id}:takeovers"


def acked_key(request_id: str) -> str:
    """How far Kafka acknowledged the turn's dispatched tool calls (``AckedDispatch``)."""
    return f"weft:turn:{request_id}:acked"


def audit_lock_key(request_id: str) -> str:
    """Which replica's ``TurnAuditor`` recovers the turn whose state was lost."""
    return f"weft:turn:{request_id}:audit"


def outbox_key(request_id: str) -> str:
    """Hash of the events whose seqs a result's write reserved, by seq, until Kafka acked
    them (``outbox``)."""
    return f"weft:turn:{request_id}:outbox"


def outbox_holder_key(request_id: str) -> str:
    """The emitter publishing the turn's outbox entries now (``outbox``), with an expiry."""
    return f"weft:turn:{request_id}:outbox:holder"
