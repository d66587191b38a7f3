"""LocalStack: start every service as a subprocess on free ports, wait until ready, stop.

Each stack gets its own topic prefix (and so its own topics and consumer groups), so a
test stack never competes with ``make up`` or another test run on the same broker.
"""

from __future__ import annotations

import atexit
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from cryptography.fernet import Fernet
from weft_platform.credentials import ensure_dev_keys
from weft_platform.kafka_acls import SERVICE_PRINCIPALS
from weft_platform.runtime import DEV_ISSUERS
from weft_storage.ownership import SERVICE_ROLES, service_url

from weft_testkit import forkserver
from weft_testkit.credentials import DevCredentials, TrustedTransport
from weft_testkit.kafka import kafka_client_env, principal_env

SERVICES = (
    "gateway",
    "agent_config",
    "engine",
    "tool_exec",
    "sandbox",
    "memory",
    "suggestions",
    "knowledge",
)

WORKERS: dict[str, tuple[str, list[str]]] = {"knowledge_worker": ("knowledge", ["worker"])}
"""Processes of a service that serve no API of their own: name -> (service, arguments);
one of each per stack (``knowledge_worker``: the ingestion worker)."""


NO_DATABASE = "postgresql+asyncpg://no_role:no_role@127.0.0.1:1/no_database"
"""The database URL of a process with no role (the engine): port 1, where nothing listens."""


def infra_env() -> dict[str, str]:
    """Connection settings of the local infrastructure (overridable from the environment);
    on a SASL broker, as its super user (``weft_testkit.kafka``)."""
    bootstrap = os.environ.get("WEFT_KAFKA_BOOTSTRAP", "127.0.0.1:19092")
    return {
        "WEFT_KAFKA_BOOTSTRAP": bootstrap,
        **kafka_client_env(bootstrap),
        "WEFT_DATABASE_URL": os.environ.get(
            "WEFT_DATABASE_URL", "postgresql+asyncpg://weft:weft@127.0.0.1:15432/weft"
        ),
        "WEFT_REDIS_URL": os.environ.get("WEFT_REDIS_URL", "redis://127.0.0.1:16379/0"),
    }


_HANDED_OUT: set[int] = set()
"""Ports this process already gave to a server: the kernel may offer a closed port again."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now and not handed out before by this process
    (two services of one stack once got the same port, and the readiness probe of one was
    answered by the other)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


@dataclass(kw_only=True)
class StackConfig:
    """What to start and where to log."""

    log_dir: Path
    replicas: dict[str, int] = field(default_factory=dict)
    """Processes per service (default 1), e.g. {"engine": 2}."""
    extra_env: dict[str, str] = field(default_factory=dict)
    ready_timeout_s: float = 120.0
    partitions: int = 3
    """Partitions of every topic of this stack (1 puts every session on one partition)."""
    redis_url: str | None = None
    """The stack's own Redis (e.g. a database number a test may FLUSHDB); None: the
    infrastructure's (``infra_env``)."""
    database_url: str | None = None
    """The stack's own PostgreSQL database (created beforehand; migrated at start); None:
    the infrastructure's. A stack on its own Redis needs its own database too: an engine
    ends the turns that its database lists as running but its Redis does not hold
    (``TurnAuditor``), so two stacks sharing a database but not a Redis would end each
    other's turns."""


Process = subprocess.Popen[bytes] | forkserver.ForkedProcess

_FORKS: forkserver.ForkServer | None = None


def wait_ready(process: Process, port: int, timeout_s: float, what: str) -> None:
    """Until the process on ``port`` answers ``/readyz`` with 200; RuntimeError naming
    ``what`` when the process exits first or ``timeout_s`` runs out."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=3) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{what} exited at start ({process.poll()})")
            try:
                if client.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
    raise RuntimeError(f"{what} was not ready in {timeout_s:.0f} s")


def start_service(module: str, args: list[str], env: dict[str, str], log: Path) -> Process:
    """``python -m module *args`` in a session of its own, output appended to ``log``:
    forked from the test run's fork server (``weft_testkit.forkserver``), or with
    ``Popen`` when ``WEFT_TESTKIT_FORK=0``."""
    global _FORKS
    if forkserver.enabled():
        if _FORKS is None:
            _FORKS = forkserver.ForkServer(Path(tempfile.mkdtemp(prefix="weft-forks-")))
            atexit.register(_FORKS.close)
        return _FORKS.spawn(module, args, env, log)
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", module, *args], env=env, stdout=out,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip


@dataclass
class _Proc:
    name: str
    port: int
    process: Process
    args: list[str] = field(default_factory=list)


def create_topics(prefix: str, partitions: int) -> None:
    """Create every topic of the deployment named by ``prefix``."""
    env = {**os.environ, **infra_env(), "WEFT_TOPIC_PARTITIONS": str(partitions)}
    subprocess.run(
        [sys.executable, "-m", "weft_platform.topics", "ensure", "--prefix", prefix,
         "--bootstrap", env["WEFT_KAFKA_BOOTSTRAP"]],
        env=env, check=True, capture_output=True, timeout=120,
    )  # fmt: skip


def delete_topics(prefix: str) -> None:
    """Delete them again, best effort: leftover topics only cost the local broker's start
    time (each stack's prefix is its own, so a long-lived broker would pile them up)."""
    env = {**os.environ, **infra_env()}
    done = subprocess.run(
        [sys.executable, "-m", "weft_platform.topics", "delete", "--prefix", prefix,
         "--bootstrap", env["WEFT_KAFKA_BOOTSTRAP"]],
        env=env, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        print(f"[weft_testkit] topics of {prefix} not deleted: {done.stderr[-300:]!r}")


def _service_of(name: str) -> str:
    """The service (package ``weft_<service>``, Kafka principal) a process belongs to."""
    return WORKERS[name][0] if name in WORKERS else name


class LocalStack:
    """A running stack; use as a context manager."""

    def __init__(self, config: StackConfig):
        self.config = config
        self.prefix = f"t{secrets.token_hex(4)}."
        self.tenant = f"tenant-{secrets.token_hex(4)}"
        self.api_key = f"key-{secrets.token_hex(16)}"
        self.ports: dict[str, list[int]] = {}
        self.metrics_ports: dict[int, int] = {}
        """Each process's metrics port, by its HTTP port."""
        self._procs: list[_Proc] = []
        self.mcp_secret_keys = Fernet.generate_key().decode()
        """This stack's ``WEFT_MCP_SECRET_KEYS`` (agent-config's MCP secrets)."""
        self.credentials_dir = config.log_dir / "credentials"
        """This stack's service credential keys (development pairs, made at start)."""

    @property
    def credentials(self) -> DevCredentials:
        """Signers for tests that stand in for the gateway or an operator."""
        return DevCredentials.load(self.credentials_dir)

    @property
    def gateway_url(self) -> str:
        """Base URL of the first gateway."""
        return f"http://127.0.0.1:{self.ports['gateway'][0]}"

    @property
    def llm_url(self) -> str:
        """Base URL of the scripted LLM test double (without /v1)."""
        return f"http://127.0.0.1:{self.ports['scripted_llm'][0]}"

    def api_client(self, timeout: float = 60) -> httpx.AsyncClient:
        """A client of the public API, authenticated as the stack's tenant."""
        headers = {"Authorization": f"Bearer {self.api_key}"}
        return httpx.AsyncClient(base_url=self.gateway_url, headers=headers, timeout=timeout)

    def internal_client(
        self, service: str, index: int = 0, timeout: float = 30
    ) -> httpx.AsyncClient:
        """A client of one replica's internal routes that presents, on each request, the
        credential the gateway (or, for a system route, an operator) would."""
        transport = TrustedTransport(httpx.AsyncHTTPTransport(), self.credentials)
        return httpx.AsyncClient(
            base_url=self.url(service, index), transport=transport, timeout=timeout
        )

    def url(self, service: str, index: int = 0) -> str:
        """Base URL of one replica of ``service``."""
        return f"http://127.0.0.1:{self.ports[service][index]}"

    def metrics_url(self, service: str, index: int = 0) -> str:
        """The Prometheus metrics URL of one replica of ``service`` (its own port)."""
        return f"http://127.0.0.1:{self.metrics_ports[self.ports[service][index]]}/metrics"

    def metrics_url_of_port(self, port: int) -> str:
        """The metrics URL of the process on HTTP ``port`` (e.g. one from
        :meth:`start_extra`)."""
        return f"http://127.0.0.1:{self.metrics_ports[port]}/metrics"

    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Create topics, start every process, wait until all are ready."""
        self.config.log_dir.mkdir(parents=True, exist_ok=True)
        ensure_dev_keys(self.credentials_dir, DEV_ISSUERS)
        for name in ("scripted_llm", *SERVICES, *WORKERS):
            count = self.config.replicas.get(name, 1)
            self.ports[name] = [free_port() for _ in range(count)]
        create_topics(self.prefix, self.config.partitions)
        self._migrate()
        llm_port = self.ports["scripted_llm"][0]
        self._spawn(
            "scripted_llm", llm_port, ["serve", "--host", "127.0.0.1", "--port", str(llm_port)]
        )
        for name in SERVICES:
            for port in self.ports[name]:
                self._spawn(name, port, [])
        for name, (_, args) in WORKERS.items():
            for port in self.ports[name]:
                self._spawn(name, port, args)
        self._wait_ready()

    def _own_infra(self) -> dict[str, str]:
        own = {
            "WEFT_REDIS_URL": self.config.redis_url,
            "WEFT_DATABASE_URL": self.config.database_url,
        }
        return {name: url for name, url in own.items() if url}

    def _migrate(self) -> None:
        env = {**os.environ, **infra_env(), **self._own_infra()}
        subprocess.run(
            [sys.executable, "-m", "weft_storage.migrate", "upgrade"],
            env=env, check=True, capture_output=True, timeout=120,
        )  # fmt: skip

    def service_env(self, name: str, port: int) -> dict[str, str]:
        """Environment of one service process (logged in to Kafka as its own principal,
        to PostgreSQL as its own role)."""
        # The migration owner's URL stays the tests' and the migration's; each service
        # (a worker: its service's) gets its role's, with rights on its own tables only
        # (weft_storage.ownership). A process with no role (the engine) gets a URL
        # nothing answers, not the owner's: it must open no database.
        service = _service_of(name)
        own_role = {
            "WEFT_DATABASE_URL": service_url(self.database_url, service)
            if service in SERVICE_ROLES
            else NO_DATABASE
        }
        return {
            **os.environ,
            **principal_env(infra_env(), SERVICE_PRINCIPALS.get(_service_of(name))),
            "PYTHONUNBUFFERED": "1",
            "WEFT_HTTP_PORT": str(port),
            "WEFT_METRICS_PORT": str(self.metrics_ports.setdefault(port, free_port())),
            "WEFT_TOPIC_PREFIX": self.prefix,
            "WEFT_INSTANCE_ID": f"{name}-{port}",
            "WEFT_LOG_FORMAT": "json",
            "WEFT_MEMORY_URL": self.url("memory"),
            "WEFT_AGENT_CONFIG_URL": self.url("agent_config"),
            "WEFT_SUGGESTIONS_URL": self.url("suggestions"),
            "WEFT_SANDBOX_URL": self.url("sandbox"),
            "WEFT_KNOWLEDGE_URL": self.url("knowledge"),
            "WEFT_GATEWAY_URL": self.url("gateway"),  # memory's prompt timer renews there
            "WEFT_DEV_API_KEY": self.api_key,
            "WEFT_DEV_TENANT": self.tenant,
            # Stacks share the database: each generates wiki pages and extracts graphs of
            # its own tenant only, with its own scripted model (docs/knowledge.md).
            "WEFT_KNOWLEDGE_WORKER_TENANTS": self.tenant,
            "OPENAI_BASE_URL": f"{self.llm_url}/v1",
            "OPENAI_API_KEY": "scripted-llm-test-double",
            "WEFT_LLM_MODEL": "weft-scripted",
            "WEFT_CREDENTIALS_DIR": str(self.credentials_dir),
            "WEFT_CREDENTIALS_DEV_KEYS": "false",
            "WEFT_MCP_SECRET_KEYS": self.mcp_secret_keys,
            # The tests' MCP servers listen on 127.0.0.1 (docs/mcp.md: the operator's
            # allowlist); other loopback addresses (127.0.0.2) stay refused.
            "WEFT_MCP_ALLOWED_NETWORKS": "127.0.0.1/32",
            "WEFT_PUBLIC_BASE_URL": self.url("gateway"),  # the OAuth redirect URI's base
            **self._own_infra(),
            **own_role,
            **self.config.extra_env,
        }

    @property
    def database_url(self) -> str:
        """The stack's database as the migration owner role (tests' direct access)."""
        return self.config.database_url or infra_env()["WEFT_DATABASE_URL"]

    def _spawn(
        self, name: str, port: int, args: list[str], env: dict[str, str] | None = None
    ) -> None:
        process = start_service(
            f"weft_{_service_of(name)}", args, {**self.service_env(name, port), **(env or {})},
            self.log_path(name, port),
        )  # fmt: skip
        self._procs.append(_Proc(name, port, process, args))

    def _wait_ready(self, procs: list[_Proc] | None = None) -> None:
        deadline = time.monotonic() + self.config.ready_timeout_s
        pending = list(self._procs if procs is None else procs)
        with httpx.Client(timeout=3) as client:
            while pending:
                proc = pending[0]
                if proc.process.poll() is not None:
                    again = self._on_another_port(proc)
                    if again is not None:
                        pending[0] = again
                        continue
                    self.stop()
                    raise RuntimeError(f"{proc.name} exited at start; see {self.config.log_dir}")
                try:
                    if client.get(f"http://127.0.0.1:{proc.port}/readyz").status_code == 200:
                        pending.pop(0)
                        continue
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{proc.name} not ready in time; see {self.config.log_dir}")
                time.sleep(0.3)

    def _on_another_port(self, proc: _Proc) -> _Proc | None:
        """``proc`` started again when it exited because a port picked for it was taken
        between :func:`free_port` and its bind (an outgoing connection can take any port
        of the ephemeral range): its metrics port, or the HTTP port of a process no peer
        calls (a worker). None when that is not why it exited, or a peer names its port."""
        log = self.log_path(proc.name, proc.port).read_text(errors="replace")
        taken = re.findall(r"address \('127\.0\.0\.1', (\d+)\)\: address already in use", log)
        if not taken:
            return None
        port = int(taken[-1])
        if port == self.metrics_ports.get(proc.port):
            self.metrics_ports[proc.port] = free_port()
            new_port = proc.port
        elif port == proc.port and proc.name in WORKERS:
            new_port = free_port()
            ports = self.ports[proc.name]
            ports[ports.index(proc.port)] = new_port
        else:
            return None
        self._procs.remove(proc)
        self._spawn(proc.name, new_port, proc.args)
        return self._procs[-1]

    def pids(self, name: str) -> list[int]:
        """Process ids of the running replicas of ``name``."""
        return [p.process.pid for p in self._procs if p.name == name and p.process.poll() is None]

    def kill(self, name: str, index: int = 0, sig: int = signal.SIGKILL) -> int:
        """Send ``sig`` to one replica of ``name`` (``index`` -1: the newest, e.g. one
        from :meth:`start_extra`), wait for it to exit; its exit status."""
        proc = [p for p in self._procs if p.name == name][index]
        proc.process.send_signal(sig)
        return proc.process.wait(timeout=60)

    def log_path(self, name: str, port: int) -> Path:
        """The log file of the process of ``name`` on ``port``."""
        return self.config.log_dir / f"{name}-{port}.log"

    def start_again(self, name: str, index: int = 0, env: dict[str, str] | None = None) -> None:
        """Start a killed replica of ``name`` again on its port; wait until it is ready.
        ``env``: variables that differ from the stack's for this process."""
        old = [p for p in self._procs if p.name == name][index]
        if old.process.poll() is None:
            raise RuntimeError(f"{name} replica {index} is still running")
        self._spawn(name, old.port, WORKERS[name][1] if name in WORKERS else [], env)
        new = self._procs.pop()
        self._procs[self._procs.index(old)] = new
        self._wait_ready([new])

    def start_extra(self, name: str, args: list[str]) -> int:
        """Start one more process of service ``name`` with ``args`` (e.g. the gateway's
        ``projector``) on a free port, stopped with the stack; its port once ready."""
        port = free_port()
        self._spawn(name, port, args)
        self._wait_ready([self._procs[-1]])
        return port

    def stop(self) -> None:
        """SIGTERM every process, then SIGKILL what is left after 20 s; then delete the
        stack's topics."""
        for proc in self._procs:
            if proc.process.poll() is None:
                proc.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self._procs:
            try:
                proc.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.process.kill()
        self._procs.clear()
        delete_topics(self.prefix)
