"""Service credentials without services: signing, verification, key rotation, the
development keys, and which records a consumer accepts (weft_platform.credentials,
weft_platform.record_credentials)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jwt
import pytest
from weft_contracts import CancelRequested, CancelRequestedData, Topic
from weft_platform.credentials import (
    GATEWAY,
    RECORDS,
    TURN_AUDIENCE,
    CredentialRejected,
    MissingKeys,
    ensure_dev_keys,
    load_signer,
    load_verifier,
    new_key_pair,
)
from weft_platform.record_credentials import RecordCheck, record_scope
from weft_platform.runtime import DEV_ISSUERS, credential_verifier
from weft_platform.settings import ServiceSettings


def _turn(directory: Path, tenant: str = "t1", session: str = "s1", **kw: float) -> str:
    return load_signer(directory, GATEWAY).request(
        tenant_id=tenant,
        user_id="u1",
        session_id=session,
        request_id="r1",
        audience=TURN_AUDIENCE,
        ttl_s=kw.get("ttl_s", 60),
        issued_at=kw.get("issued_at"),
    )


def test_a_token_of_the_old_key_verifies_while_both_keys_are_configured(tmp_path: Path) -> None:
    new_key_pair(tmp_path, GATEWAY, "2026-01")
    old_token = _turn(tmp_path)
    new_key_pair(tmp_path, GATEWAY, "2026-06")  # the rollover's new key
    signer = load_signer(tmp_path, GATEWAY)
    assert signer.kid == "2026-06", "signers move to the newest key"
    verifier = load_verifier(tmp_path)
    assert verifier.verify_request(old_token, "memory").tenant_id == "t1"
    assert verifier.verify_request(_turn(tmp_path), "memory").tenant_id == "t1"
    (tmp_path / f"{GATEWAY}.2026-01.pub").unlink()  # the rollover ends
    with pytest.raises(CredentialRejected, match="unknown key") as refused:
        load_verifier(tmp_path).verify_request(old_token, "memory")
    assert refused.value.status == 401


def test_another_issuers_key_cannot_sign_for_the_gateway(tmp_path: Path) -> None:
    """A key signs only for its own issuer: the engine's key cannot mint a request
    credential, even by naming the gateway's issuer in the token."""
    ensure_dev_keys(tmp_path, DEV_ISSUERS)
    engine = load_signer(tmp_path, "engine")
    with pytest.raises(ValueError, match="only the gateway"):
        engine.request(tenant_id="t", user_id="u", audience=["memory"], ttl_s=60)
    now = int(time.time())
    claims = {"typ": "request", "ten": "t", "sub": "u", "iss": GATEWAY, "aud": ["memory"]}
    forged = jwt.encode(
        {**claims, "iat": now, "exp": now + 60},
        engine._private,
        algorithm="EdDSA",
        headers={"kid": f"engine.{engine.kid}"},
    )
    with pytest.raises(CredentialRejected) as refused:
        load_verifier(tmp_path).verify_request(forged, "memory")
    assert refused.value.status == 401


def test_expired_and_wrong_audience_are_401(tmp_path: Path) -> None:
    ensure_dev_keys(tmp_path, DEV_ISSUERS)
    verifier = load_verifier(tmp_path)
    expired = _turn(tmp_path, issued_at=time.time() - 3600)
    with pytest.raises(CredentialRejected, match="expired"):
        verifier.verify_request(expired, "memory")
    with pytest.raises(CredentialRejected, match="not meant for"):
        verifier.verify_request(_turn(tmp_path), "sandbox")


def test_outside_development_a_service_without_keys_refuses_to_start(tmp_path: Path) -> None:
    settings = ServiceSettings(credentials_dir=str(tmp_path / "none"), credentials_dev_keys=False)
    with pytest.raises(MissingKeys):
        credential_verifier(settings)
    dev = ServiceSettings(credentials_dir=str(tmp_path / "dev"), credentials_dev_keys=True)
    assert f"{GATEWAY}.dev1" in credential_verifier(dev).key_ids


def _cancel(tenant: str = "t1", session: str = "s1", **kw: object) -> CancelRequested:
    return CancelRequested(
        tenant_id=tenant, session_id=session, request_id="r1", data=CancelRequestedData(), **kw
    )


def _reason(check: RecordCheck, record: CancelRequested) -> str | None:
    refused = check.refusal(Topic.AGENT_CONTROL, record)
    return None if refused is None else str(refused)


def test_a_record_is_accepted_only_with_its_own_tenants_and_sessions_credential(
    tmp_path: Path,
) -> None:
    ensure_dev_keys(tmp_path, DEV_ISSUERS)
    check = RecordCheck(load_verifier(tmp_path))
    assert _reason(check, _cancel(credential=_turn(tmp_path))) is None
    assert _reason(check, _cancel()) == "record without a credential"
    other_tenant = _cancel(credential=_turn(tmp_path, tenant="t2"))
    assert _reason(check, other_tenant) == "record's credential is for another tenant"
    other_session = _cancel(credential=_turn(tmp_path, session="s2"))
    assert _reason(check, other_session) == "record's credential is for another session"
    api_only = load_signer(tmp_path, GATEWAY).request(
        tenant_id="t1", user_id="u1", session_id="s1", audience=["memory"], ttl_s=60
    )
    assert "not meant for" in str(_reason(check, _cancel(credential=api_only)))


def test_a_records_credential_is_judged_at_the_records_time(tmp_path: Path) -> None:
    """A lagging consumer (or a replayed dead letter) accepts what was valid when it was
    written; a record dated outside its credential's life is refused."""
    ensure_dev_keys(tmp_path, DEV_ISSUERS)
    check = RecordCheck(load_verifier(tmp_path))
    an_hour_ago = time.time() - 3600
    old = _turn(tmp_path, issued_at=an_hour_ago, ttl_s=60)
    written_then = datetime.fromtimestamp(an_hour_ago + 10, UTC)
    assert _reason(check, _cancel(credential=old, time=written_then)) is None
    assert "not valid at that time" in str(_reason(check, _cancel(credential=old)))
    late = written_then + timedelta(minutes=10)
    assert "not valid at that time" in str(_reason(check, _cancel(credential=old, time=late)))


def test_a_service_credential_opens_only_the_topics_of_its_scope(tmp_path: Path) -> None:
    ensure_dev_keys(tmp_path, DEV_ISSUERS)
    check = RecordCheck(load_verifier(tmp_path))
    engine = load_signer(tmp_path, "engine")
    ends_turns = engine.service(RECORDS, [record_scope(Topic.AGENT_EVENTS)])
    record = _cancel(credential=ends_turns)
    assert check.refusal(Topic.AGENT_EVENTS, record) is None
    refused = check.refusal(Topic.AGENT_CONTROL, record)
    assert refused is not None and refused.status == 403
    assert check.refusal(Topic.DLQ, _cancel()) is None, "dead letters carry no request"
