"""The Kubernetes backend: one Pod per session, commands through the exec API (SPEC S-01,
S-05). Not yet run on a cluster: tested against a local fake of the API server.

The replica keeps its copy of the workspace (the file tools and the checkpoints work on
it, as with the local backend); a command runs in the session's pod:

1. the pod is found by name (any replica finds it) and its last-use annotation renewed,
   or it is created and awaited;
2. when the pod's workspace does not match this copy (its digest annotation differs:
   a new pod, a file tool wrote, another replica restored), the copy is pushed (tar);
3. the command runs through exec, in ``/bin/sh -c``, under the caps of
   :class:`~weft_sandbox.local_backend.Command`; on timeout every process of the command
   container gets SIGTERM, then SIGKILL (``kill -1``: all but the container's pid 1);
4. the pod's workspace (but ``input``) is pulled back into the copy, and the digest
   annotation records that both match.

Idle pods (last use older than the idle TTL) are deleted by whichever replica's reaper
sees them first; the deletion is conditional on the resource version it judged, so a pod
another replica has just used survives.

The synchronous ``kubernetes`` client runs in threads; an exec replaces its ApiClient's
``call_api`` while it runs (``kubernetes.stream``), so each exec gets an ApiClient of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, Any

import structlog
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream

from weft_sandbox import k8s_sync
from weft_sandbox.k8s_pod import (
    COMMAND_CONTAINER,
    FILES_CONTAINER,
    LAST_USED,
    SELECTOR,
    SYNCED,
    pod_name,
    session_pod,
)
from weft_sandbox.local_backend import Command, CommandResult
from weft_sandbox.settings import SandboxSettings
from weft_sandbox.workspace import INPUT, WORKSPACE, Workspace

log = structlog.get_logger(__name__)

NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
PATH = "/usr/local/bin:/usr/bin:/bin"
CHUNK = 1024 * 1024
TAIL_S = 10.0
"""After the kill, how long the exec may take to report before it is abandoned."""

# $1 work dir, $2 stdin length, the rest: env -i NAME=value... /bin/sh -c command. stdin
# comes over the exec's stdin channel, which v4 cannot half-close: ``head -c`` ends it.
RUN = (
    'cd "$1" || exit 126; n="$2"; shift 2; '
    'if [ "$n" -gt 0 ]; then head -c "$n" | "$@"; else "$@" </dev/null; fi'
)
# The input folder itself stays: it is the source of the command container's read-only
# subPath mount, which a new folder of the same name would not replace.
PUSH = (
    f'find {WORKSPACE} -mindepth 1 ! -path {WORKSPACE}/{INPUT} -delete && head -c "$0" | '
    f"tar -x -f - -C {WORKSPACE} --no-same-owner"
)
PULL = ["tar", "-c", "-f", "-", "-C", WORKSPACE, f"--exclude=./{INPUT}", "."]


class PodUnavailable(RuntimeError):
    """The session's pod cannot be created, started or reached."""


@dataclass
class _Exec:
    """What an exec did."""

    exit_code: int | None
    timed_out: bool
    stdout_total: int
    stderr_total: int


class _Capped:
    """Keeps the first ``cap`` bytes of a stream and counts the rest."""

    def __init__(self, cap: int):
        self.cap = cap
        self.kept = bytearray()
        self.total = 0

    def __call__(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if len(self.kept) < self.cap:
            self.kept += chunk[: self.cap - len(self.kept)]


class KubernetesBackend:
    """Runs commands in one pod per session."""

    mounts_read_only = False
    """The pod has no mount of the replica's skill packages (skills run on ``local``)."""

    def __init__(self, settings: SandboxSettings, configuration: Any = None):
        self._settings = settings
        self._configuration = configuration
        self.namespace = settings.sandbox_k8s_namespace
        self._reaper: asyncio.Task[None] | None = None
        # Exec streams block a thread for as long as a command runs (up to 600 s): their own
        # pool, so they never starve the default executor's short calls.
        self._streams = ThreadPoolExecutor(
            max_workers=settings.sandbox_concurrency * 2, thread_name_prefix="sandbox-exec"
        )

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self, *, reap: bool = True) -> None:
        """Load the credentials (the kubeconfig, else the pod's service account), check the
        API answers, and start the idle reaper."""
        if self._configuration is None:
            self._configuration = await asyncio.to_thread(self._load_configuration)
        if not self.namespace:
            self.namespace = "default"
        await asyncio.to_thread(self._call, lambda api: api.list_namespaced_pod(
            self.namespace, label_selector=SELECTOR, limit=1))  # fmt: skip
        log.info("sandbox_backend", backend="kubernetes", namespace=self.namespace)
        if reap:
            self._reaper = asyncio.create_task(self._reap_loop())

    async def stop(self) -> None:
        """Stop the reaper (the pods stay: other replicas and the TTL take care of them)."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        self._streams.shutdown(wait=False, cancel_futures=True)

    async def _streaming(self, action: Callable[..., _Exec], *args: Any, **kwargs: Any) -> _Exec:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._streams, partial(action, *args, **kwargs))

    def _load_configuration(self) -> Any:
        configuration = client.Configuration()
        kubeconfig = self._settings.sandbox_k8s_kubeconfig
        if kubeconfig:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, client_configuration=configuration
            )
            if not self.namespace:
                _, context = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
                    config_file=kubeconfig
                )
                self.namespace = context.get("context", {}).get("namespace", "")
        else:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            if not self.namespace and NAMESPACE_FILE.exists():
                self.namespace = NAMESPACE_FILE.read_text().strip()
        return configuration

    def _call(self, action: Callable[[Any], Any]) -> Any:
        with client.ApiClient(self._configuration) as api_client:
            return action(client.CoreV1Api(api_client))

    # -- commands ------------------------------------------------------------------------

    async def run(self, space: Workspace, command: Command) -> CommandResult:
        """Run ``command`` in the session's pod and bring its changes back to ``space``;
        raises :class:`PodUnavailable` only when the pod itself cannot serve."""
        name = pod_name(space.tenant_id, space.session_id)
        started = time.monotonic()
        pod = await self._ready_pod(name)
        digest = await asyncio.to_thread(k8s_sync.tree_digest, space.work)
        if _annotations(pod).get(SYNCED) != digest:
            await self._push(space, name)
        out, err = _Capped(command.stdout_cap), _Capped(command.stderr_cap)
        env = {"HOME": WORKSPACE, "PATH": PATH, "LANG": "C.UTF-8", "TMPDIR": "/tmp",
               **(command.env or {})}  # fmt: skip
        argv = ["/bin/sh", "-c", RUN, "weft-run", command.work_dir, str(len(command.stdin)),
                "env", "-i", *[f"{k}={v}" for k, v in env.items()],
                "/bin/sh", "-c", command.command]  # fmt: skip
        done = await self._streaming(
            self._exec, name, COMMAND_CONTAINER, argv, command.stdin, out, err,
            timeout_s=command.timeout_s,
        )  # fmt: skip
        if done.exit_code is None and not done.timed_out:
            await self._mark(name, synced="")
            raise PodUnavailable("the command's exec in the sandbox pod ended without an "
                                 "exit status (the pod was stopped?)")  # fmt: skip
        await self._pull(space, name)
        return CommandResult(
            exit_code=None if done.timed_out else done.exit_code,
            stdout=bytes(out.kept),
            stderr=bytes(err.kept),
            stdout_total=out.total,
            stderr_total=err.total,
            timed_out=done.timed_out,
            duration_ms=int((time.monotonic() - started) * 1000),
        )

    async def _ready_pod(self, name: str) -> Any:
        """The running pod ``name`` with its last use renewed; created when missing, or once
        a pod being deleted (reaped by another replica) is gone."""
        patch = {"metadata": {"annotations": {LAST_USED: f"{time.time():.3f}"}}}
        try:
            pod = await asyncio.to_thread(
                self._call, lambda api: api.patch_namespaced_pod(name, self.namespace, patch)
            )
        except ApiException as exc:
            if exc.status != 404:
                raise PodUnavailable(f"the sandbox pod cannot be reached: {_reason(exc)}") from exc
            pod = None
        deadline = time.monotonic() + self._settings.sandbox_k8s_start_timeout_s
        while True:
            if pod is None:
                pod = await self._create(name)
            if pod is not None:
                phase = "Terminating" if pod.metadata.deletion_timestamp else _phase(pod)
                if phase == "Running":
                    return pod
                if phase in ("Succeeded", "Failed"):
                    await self.delete(name)
                    raise PodUnavailable(
                        f"the sandbox pod ended ({phase}); the next call starts one"
                    )
                if time.monotonic() > deadline:
                    raise PodUnavailable(f"the sandbox pod did not start in time ({phase})")
            await asyncio.sleep(0.2)  # a watch would do; the phase changes once or twice
            pod = await self._read(name)

    async def _read(self, name: str) -> Any:
        """Pod ``name``, None when there is none."""
        try:
            return await asyncio.to_thread(
                self._call, lambda api: api.read_namespaced_pod(name, self.namespace)
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise PodUnavailable(f"the sandbox pod cannot be reached: {_reason(exc)}") from exc

    async def _create(self, name: str) -> Any:
        """The new pod ``name``; when it exists already (another replica created it, or it
        is still being deleted), that one, or None when it is gone meanwhile."""
        body = session_pod(self._settings, name, now=time.time())
        try:
            pod = await asyncio.to_thread(
                self._call, lambda api: api.create_namespaced_pod(self.namespace, body)
            )
            log.info("sandbox_pod_created", pod=name)
            return pod
        except ApiException as exc:
            if exc.status != 409:
                raise PodUnavailable(f"the sandbox pod cannot be created: {_reason(exc)}") from exc
        return await self._read(name)

    async def delete(self, name: str, resource_version: str | None = None) -> bool:
        """Delete pod ``name`` (only at ``resource_version`` when given); False when it was
        gone or had changed."""
        options = client.V1DeleteOptions(
            grace_period_seconds=0,
            preconditions=client.V1Preconditions(resource_version=resource_version)
            if resource_version
            else None,
        )
        try:
            await asyncio.to_thread(self._call, lambda api: api.delete_namespaced_pod(
                name, self.namespace, body=options))  # fmt: skip
        except ApiException as exc:
            if exc.status in (404, 409):
                return False
            raise
        return True

    # -- files ---------------------------------------------------------------------------

    async def _push(self, space: Workspace, name: str) -> None:
        """Make the pod's workspace this copy (``input`` included)."""
        with tempfile.TemporaryFile(dir=space.home) as tar:
            await asyncio.to_thread(k8s_sync.pack, space.work, tar)
            size = tar.tell()
            tar.seek(0)
            err = _Capped(4096)
            done = await self._streaming(
                self._exec, name, FILES_CONTAINER, ["/bin/sh", "-c", PUSH, str(size)], tar,
                _Capped(0), err, timeout_s=300.0,
            )  # fmt: skip
        if done.exit_code != 0:
            detail = bytes(err.kept).decode(errors="replace")
            raise PodUnavailable(f"the workspace could not be copied into the pod: {detail}")

    async def _pull(self, space: Workspace, name: str) -> None:
        """Make this copy the pod's workspace; record that they match. A workspace over the
        cap is not taken: the copy stays as it was, and is pushed back over the pod next."""
        cap = self._settings.sandbox_workspace_bytes
        stream_cap = cap * 2 + CHUNK  # tar headers and padding; stops a flood of headers
        with tempfile.TemporaryFile(dir=space.home) as tar:
            written = _ToFile(tar, stream_cap)
            err = _Capped(4096)
            done = await self._streaming(
                self._exec, name, FILES_CONTAINER, PULL, b"", written, err, timeout_s=300.0
            )
            if done.exit_code != 0 and not written.over:
                await self._mark(name, synced="")
                detail = bytes(err.kept).decode(errors="replace")
                raise PodUnavailable(
                    f"the workspace could not be copied out of the sandbox pod: {detail}"
                )
            tar.seek(0)
            used = None if written.over else await asyncio.to_thread(k8s_sync.content_bytes, tar)
            used = used if used is None else used + k8s_sync.input_bytes(space)
            if used is None or used > cap:
                await self._mark(name, synced="")
                size = f"{used} bytes" if used is not None else f"over {stream_cap} bytes"
                raise PodUnavailable(
                    f"the workspace grew to {size}, over its {cap}-byte cap; this "
                    "command's changes were undone"
                )
            tar.seek(0)
            try:
                skipped = await asyncio.to_thread(k8s_sync.unpack, space, tar)
            except (OSError, tarfile.TarError) as exc:  # the copy holds part of the pod's files
                await self._mark(name, synced="")  # and is what the next call pushes
                raise PodUnavailable(
                    f"the workspace from the sandbox pod could not be unpacked: {exc}"
                ) from exc
        if skipped:
            log.warning("sandbox_pod_members_skipped", pod=name, count=skipped)
        digest = await asyncio.to_thread(k8s_sync.tree_digest, space.work)
        # A skipped member leaves the pod holding something the copy does not: push next time.
        await self._mark(name, synced="" if skipped else digest)

    async def _mark(self, name: str, *, synced: str) -> None:
        annotations = {LAST_USED: f"{time.time():.3f}", SYNCED: synced}
        patch = {"metadata": {"annotations": annotations}}
        with contextlib.suppress(ApiException):  # gone: the next call creates and pushes
            await asyncio.to_thread(
                self._call, lambda api: api.patch_namespaced_pod(name, self.namespace, patch)
            )

    # -- exec ----------------------------------------------------------------------------

    def _exec(
        self,
        name: str,
        container: str,
        argv: list[str],
        stdin: bytes | IO[bytes],
        on_stdout: Callable[[bytes], None],
        on_stderr: Callable[[bytes], None],
        *,
        timeout_s: float,
    ) -> _Exec:
        """Run ``argv`` in ``container`` of pod ``name`` (in a thread): stdin sent whole,
        output handed over as it comes, killed at ``timeout_s``."""
        has_stdin = not isinstance(stdin, bytes) or bool(stdin)
        with client.ApiClient(self._configuration) as api_client:
            api = client.CoreV1Api(api_client)
            try:
                resp = stream(
                    api.connect_get_namespaced_pod_exec, name, self.namespace, command=argv,
                    container=container, stdin=has_stdin, stdout=True, stderr=True, tty=False,
                    _preload_content=False, binary=True,
                )  # fmt: skip
            except ApiException as exc:
                raise PodUnavailable(f"exec in the sandbox pod failed: {_reason(exc)}") from exc
            try:
                feeder = threading.Thread(target=_feed, args=(resp, stdin), daemon=True)
                if has_stdin:
                    feeder.start()
                totals = [0, 0]

                def drain() -> None:
                    for channel, sink in ((1, on_stdout), (2, on_stderr)):
                        if chunk := resp.read_channel(channel):
                            totals[channel - 1] += len(chunk)
                            sink(chunk)

                deadline = time.monotonic() + timeout_s
                timed_out = False
                while resp.is_open():
                    left = deadline - time.monotonic()
                    if left <= 0 and not timed_out:
                        timed_out = True
                        self._kill(name, container)
                        deadline = time.monotonic() + TAIL_S
                        continue
                    if left <= 0:
                        break  # the kill did not end it: abandon the stream
                    resp.update(timeout=min(left, 1.0))
                    drain()
                # Reading one channel may read further frames, up to the close, into the
                # others (WSClient.read_channel updates when its channel is empty).
                drain()
                status = resp.read_channel(3)
            finally:
                resp.close()
        return _Exec(
            exit_code=_exit_code(status),
            timed_out=timed_out,
            stdout_total=totals[0],
            stderr_total=totals[1],
        )

    def _kill(self, name: str, container: str) -> None:
        grace = self._settings.sandbox_kill_grace_s
        script = f"kill -TERM -1; sleep {grace}; kill -KILL -1; true"
        log.info("sandbox_pod_kill", pod=name)
        try:
            self._exec(name, container, ["/bin/sh", "-c", script], b"", _drop, _drop,
                       timeout_s=grace + TAIL_S)  # fmt: skip
        except PodUnavailable:
            log.exception("sandbox_pod_kill_failed", pod=name)

    # -- idle pods (S-05) ----------------------------------------------------------------

    async def reap(self, ttl_s: float) -> int:
        """Delete the session pods unused for ``ttl_s``; how many."""
        pods = await asyncio.to_thread(self._call, lambda api: api.list_namespaced_pod(
            self.namespace, label_selector=SELECTOR))  # fmt: skip
        now = time.time()
        reaped = 0
        for pod in pods.items:
            try:
                last = float(_annotations(pod).get(LAST_USED) or 0)
            except ValueError:
                last = 0.0
            if now - last > ttl_s and await self.delete(
                pod.metadata.name, pod.metadata.resource_version
            ):
                reaped += 1
        return reaped

    async def _reap_loop(self) -> None:
        while True:
            await asyncio.sleep(self._settings.sandbox_reap_interval_s)
            try:
                if reaped := await self.reap(self._settings.sandbox_idle_ttl_s):
                    log.info("sandbox_pods_reaped", pods=reaped)
            except Exception:  # the next round tries again
                log.exception("sandbox_pod_reap_failed")


class _ToFile:
    """Writes a stream to a file up to ``cap`` bytes; past it, notes it and drops the rest."""

    def __init__(self, out: IO[bytes], cap: int):
        self._out = out
        self._cap = cap
        self.size = 0
        self.over = False

    def __call__(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self._cap:
            self.over = True
        elif not self.over:
            self._out.write(chunk)


def _drop(_: bytes) -> None:
    pass


def _feed(resp: Any, stdin: bytes | IO[bytes]) -> None:
    with contextlib.suppress(Exception):  # the exec ended first: nothing more to send
        if isinstance(stdin, bytes):
            for at in range(0, len(stdin), CHUNK):
                resp.write_stdin(stdin[at : at + CHUNK])
            return
        while chunk := stdin.read(CHUNK):
            resp.write_stdin(chunk)


def _exit_code(status: bytes | str) -> int | None:
    """The exit code in the exec's status (channel 3), None when there is none."""
    if not status:
        return None
    try:
        parsed = json.loads(status)
    except ValueError:
        return None
    if parsed.get("status") == "Success":
        return 0
    for cause in (parsed.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            with contextlib.suppress(TypeError, ValueError):
                return int(cause.get("message"))
    return None


def _phase(pod: Any) -> str | None:
    """The pod's phase, "Running" only once every container runs (exec needs its own)."""
    status = pod.status
    phase: str | None = status.phase if status else None
    if phase == "Running" and not all(
        s.state and s.state.running for s in status.container_statuses or []
    ):
        return "Starting"
    return phase


def _annotations(pod: Any) -> dict[str, str]:
    return dict((pod.metadata.annotations if pod.metadata else None) or {})


def _reason(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "").get("message") or exc.reason)
    except (TypeError, ValueError):
        return f"{exc.status} {exc.reason}"
