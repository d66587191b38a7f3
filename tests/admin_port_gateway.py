"""One gateway process with its admin API on a port of its own (``WEFT_ADMIN_PORT``), on
the real Kafka, PostgreSQL (a migrated database) and Redis: no other service, no
projector. Used by the integration and the hostile tests of the split."""

from __future__ import annotations

import hashlib
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from weft_testkit.stack import free_port, infra_env, wait_ready

OPERATOR_TOKEN = f"op-{secrets.token_hex(24)}"


@dataclass(frozen=True)
class SplitGateway:
    """The running process and its two ports."""

    process: subprocess.Popen[bytes]
    public_port: int
    admin_port: int
    log: Path

    @property
    def public_url(self) -> str:
        return f"http://127.0.0.1:{self.public_port}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    @property
    def operator(self) -> dict[str, str]:
        """Headers of an operator's request."""
        return {"Authorization": f"Bearer {OPERATOR_TOKEN}"}


@contextmanager
def split_gateway(database_url: str, workdir: Path, **extra: str) -> Iterator[SplitGateway]:
    """Start the gateway on two free ports; SIGKILL it afterwards if it still runs."""
    public, admin = free_port(), free_port()
    env = {
        **os.environ,
        **infra_env(),
        "WEFT_DATABASE_URL": database_url,
        "WEFT_HTTP_PORT": str(public),
        "WEFT_ADMIN_PORT": str(admin),
        "WEFT_METRICS_PORT": "0",
        "WEFT_PROJECTOR": "off",
        "WEFT_TOPIC_PREFIX": f"adminport{secrets.token_hex(3)}.",
        "WEFT_CREDENTIALS_DIR": str(workdir / "credentials"),
        "WEFT_CREDENTIALS_DEV_KEYS": "true",
        "WEFT_ADMIN_TOKEN_SHA256": hashlib.sha256(OPERATOR_TOKEN.encode()).hexdigest(),
        "WEFT_MAINTENANCE_INTERVAL_S": "0",
        "WEFT_LOG_FORMAT": "json",
        # A development key of its own: a gateway started without one revokes every
        # development key of the database, the shared stacks' included (key_registry).
        "WEFT_DEV_API_KEY": f"dev-{secrets.token_hex(16)}",
        "WEFT_DEV_TENANT": f"adminport-{secrets.token_hex(4)}",
        **extra,
    }
    log = workdir / "gateway.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "weft_gateway"], env=env, stdout=out,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    try:
        wait_ready(process, public, 120, f"gateway (log {log})")
        yield SplitGateway(process, public, admin, log)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)
