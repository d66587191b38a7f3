"""The local stack's fixed ports stay out of the kernel's ephemeral range.

A listening port inside 32768-60999 (Linux's default ``ip_local_port_range``) can be held as the
local end of an outgoing connection; the server meant to bind it then fails with "Address already
in use" although nothing listens. A CI run lost PostgreSQL's old default (55432) that way.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EPHEMERAL_LOW = 32768  # Linux default; IANA's dynamic range starts higher (49152)


def _defaults() -> dict[str, int]:
    text = (ROOT / "deploy/local/env.sh").read_text()
    found = re.findall(r'export (WEFT_\w+_PORT)="\$\{\1:-(\d+)\}"', text)
    return {name: int(port) for name, port in found}


def test_infrastructure_ports_are_below_the_ephemeral_range() -> None:
    ports = _defaults()
    for name in (
        "WEFT_KAFKA_PORT",
        "WEFT_KAFKA_CONTROLLER_PORT",
        "WEFT_PG_PORT",
        "WEFT_REDIS_PORT",
    ):
        assert name in ports, f"{name} has no default in deploy/local/env.sh"
    inside = {name: port for name, port in ports.items() if port >= EPHEMERAL_LOW}
    assert not inside, f"fixed ports inside the ephemeral range: {inside}"


def test_the_code_defaults_name_the_same_ports() -> None:
    ports = _defaults()
    for rel in (
        "libs/platform/src/weft_platform/settings.py",
        "libs/storage/src/weft_storage/migrate.py",
        "testing/testkit/src/weft_testkit/stack.py",
    ):
        text = (ROOT / rel).read_text()
        for port in re.findall(r"(?:weft@|redis://)127\.0\.0\.1:(\d+)/", text):
            assert int(port) in (ports["WEFT_PG_PORT"], ports["WEFT_REDIS_PORT"]), (rel, port)
