"""Which Kafka records a consumer accepts: those whose credential vouches for them.

A record of a turn carries the turn's request credential (the gateway signed it for that
tenant and session, with the ``kafka`` audience); system work (the engine ending a turn
whose state is lost) carries a service credential with the scope ``records:<topic>``.
Life is checked against the record's own ``time``, not the consumer's clock: a consumer
that lags, or a dead letter replayed later, still accepts what was valid when written.
"""

from __future__ import annotations

from weft_contracts import Envelope, Topic

from weft_platform.credentials import RECORDS, CredentialRejected, CredentialVerifier

UNCHECKED = frozenset({Topic.DLQ})
"""Topics whose records have no request: every service writes dead letters."""


def record_scope(topic: Topic) -> str:
    """The scope a service credential needs to write ``topic``'s records."""
    return f"records:{topic.value}"


class RecordCheck:
    """Verifies the credential of decoded records (:meth:`EventBus.consume`)."""

    def __init__(self, verifier: CredentialVerifier):
        self._verifier = verifier

    def refusal(self, topic: Topic, record: Envelope) -> CredentialRejected | None:
        """Why ``record`` is refused, or None when its credential vouches for it."""
        if topic in UNCHECKED:
            return None
        try:
            self._check(topic, record)
        except CredentialRejected as exc:
            return exc
        return None

    def _check(self, topic: Topic, record: Envelope) -> None:
        token = record.credential
        if not token:
            raise CredentialRejected(401, "record without a credential")
        at = record.time.timestamp()
        if self._verifier.kind(token) == "service":
            self._verifier.verify_service(token, RECORDS, record_scope(topic), at=at)
            return
        credential = self._verifier.verify_request(token, RECORDS, at=at)
        if credential.tenant_id != record.tenant_id:
            raise CredentialRejected(403, "record's credential is for another tenant")
        if credential.session_id != record.session_id:
            raise CredentialRejected(403, "record's credential is for another session")
