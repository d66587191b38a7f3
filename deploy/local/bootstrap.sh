#!/usr/bin/env bash
# Install what the local stack needs, only when it is missing, then sync the Python workspace
# and fetch the Kafka jars. Idempotent; silent (apart from one summary line) when all is there.
#
#   Debian packages: postgresql, redis-server (+ redis-tools), maven, openjdk-17-jre-headless,
#                    curl, make, bubblewrap, git, prometheus (only its binaries are used: promtool
#                    for the alert rules' unit tests, prometheus for the scrape test;
#                    docs/observability.md)  (apt-get update runs at most once, only if
#                    something is missing); then a check that bubblewrap can create its
#                    namespaces as an unprivileged user (the sandbox service needs it)
#   uv 0.13.8 (pip) when `uv` is not on PATH; then `uv sync --frozen` -> .venv
#   Kafka jars -> $WEFT_CACHE/kafka-<version>/ (deploy/local/fetch-kafka.sh)
set -euo pipefail
# shellcheck source=env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# shellcheck source=lib.sh
source "$WEFT_REPO/deploy/local/lib.sh"

UV_VERSION="0.13.8"
# uv, pip and Maven must trust the machine's CA bundle (it may hold a proxy's CA).
if [[ -z "${SSL_CERT_FILE:-}" && -f /etc/ssl/certs/ca-certificates.crt ]]; then
    export SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
fi
t0="$(now_s)"
did=()

# ------------------------------------------------------------------ Debian packages ----
missing=()
pg_present() {
    compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}
pg_present || missing+=(postgresql)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
java_major() {
    java -version 2>&1 | sed -nE '1s/.*version "([0-9]+).*/\1/p'
}
if ! command -v java >/dev/null 2>&1 || [[ "$(java_major)" -lt 17 ]]; then
    missing+=(openjdk-17-jre-headless)
fi
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v make >/dev/null 2>&1 || missing+=(make)
command -v runuser >/dev/null 2>&1 || missing+=(util-linux)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v git >/dev/null 2>&1 || missing+=(git)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)

# apt-get with a wait on the dpkg/apt locks (another apt may be running), and retries.
apt_retry() {
    local i
    for i in 1 2 3 4 5; do
        if DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 \
            -o Acquire::Retries=3 "$@"; then
            return 0
        fi
        warn "apt-get $* failed (attempt $i); retrying in 10s"
        sleep 10
    done
    return 1
}

if ((${#missing[@]})); then
    [[ $EUID -eq 0 ]] || command -v sudo >/dev/null 2>&1 ||
        die "missing packages (${missing[*]}) and not root: install them by hand"
    SUDO=()
    [[ $EUID -eq 0 ]] || SUDO=(sudo -E)
    say "installing Debian packages: ${missing[*]}"
    apt_log="$(mktemp)"
    if ! "${SUDO[@]}" bash -c "$(declare -f apt_retry warn); apt_retry -q update" >"$apt_log" 2>&1 ||
        ! "${SUDO[@]}" bash -c "$(declare -f apt_retry warn); apt_retry -q -y install --no-install-recommends ${missing[*]}" >>"$apt_log" 2>&1; then
        tail -n 40 "$apt_log" >&2
        rm -f "$apt_log"
        die "apt-get install ${missing[*]} failed"
    fi
    rm -f "$apt_log"
    did+=("apt: ${missing[*]}")
fi
pg_present || die "PostgreSQL binaries not found under /usr/lib/postgresql/*/bin after install"
command -v redis-server >/dev/null 2>&1 || die "redis-server not found after install"
[[ "$(java_major)" -ge 17 ]] || die "Java 17+ is required for Kafka ($(java -version 2>&1 | head -n 1))"
command -v mvn >/dev/null 2>&1 || die "mvn not found after install"
command -v bwrap >/dev/null 2>&1 || die "bwrap (bubblewrap) not found after install"
command -v promtool >/dev/null 2>&1 || die "promtool (Debian package prometheus) not found after install"

# The sandbox's local backend runs each command under bubblewrap as an unprivileged uid
# (as root: a per-session uid), which needs unprivileged user namespaces.
bwrap_probe=(bwrap --unshare-all --die-with-parent --ro-bind /usr /usr --symlink usr/bin /bin
    --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev true)
if [[ $EUID -eq 0 ]]; then
    bwrap_probe=(setpriv --reuid=65534 --regid=65534 --clear-groups -- "${bwrap_probe[@]}")
fi
if ! bwrap_err="$("${bwrap_probe[@]}" 2>&1)"; then
    die "bubblewrap cannot create its namespaces here (${bwrap_err:-no message}): unprivileged \
user namespaces are off or blocked (sysctl kernel.unprivileged_userns_clone=1, \
user.max_user_namespaces > 0, or a container seccomp/AppArmor profile that allows them); \
without them run the sandbox with WEFT_SANDBOX_BACKEND=none (no scripts)"
fi

# ------------------------------------------------------------------------------- uv ----
UV=()
if command -v uv >/dev/null 2>&1; then
    UV=(uv)
else
    PY3="$(command -v python3 || true)"
    [[ -n "$PY3" ]] || die "python3 not found (needed to install uv)"
    if ! "$PY3" -m uv --version >/dev/null 2>&1; then
        say "installing uv==$UV_VERSION with pip"
        pip_log="$(mktemp)"
        if ! "$PY3" -m pip install -q --disable-pip-version-check "uv==$UV_VERSION" >"$pip_log" 2>&1 &&
            ! "$PY3" -m pip install -q --disable-pip-version-check --break-system-packages \
                "uv==$UV_VERSION" >>"$pip_log" 2>&1; then
            cat "$pip_log" >&2
            rm -f "$pip_log"
            die "pip install uv==$UV_VERSION failed"
        fi
        rm -f "$pip_log"
        did+=("uv $UV_VERSION")
    fi
    if command -v uv >/dev/null 2>&1; then
        UV=(uv)
    else
        UV=("$PY3" -m uv)
    fi
fi

# ------------------------------------------------------------------ Python workspace ----
cd "$WEFT_REPO"
venv_before="$(stat -c %Y .venv/pyvenv.cfg 2>/dev/null || echo none)"
sync_log="$(mktemp)"
if [[ -f uv.lock ]]; then
    sync=("${UV[@]}" sync --frozen)
else
    sync=("${UV[@]}" sync)
fi
if ! "${sync[@]}" -q >"$sync_log" 2>&1; then
    cat "$sync_log" >&2
    rm -f "$sync_log"
    die "${sync[*]} failed"
fi
rm -f "$sync_log"
[[ -x "$WEFT_PYTHON" ]] || die "uv sync did not create $WEFT_PYTHON"
[[ "$venv_before" == "$(stat -c %Y .venv/pyvenv.cfg)" ]] || did+=(".venv created")

# ------------------------------------------------------------------------ Kafka jars ----
if [[ ! -f "$WEFT_CACHE/kafka-$WEFT_KAFKA_VERSION/.weft-complete" ]]; then
    "$WEFT_REPO/deploy/local/fetch-kafka.sh" >/dev/null
    did+=("Kafka $WEFT_KAFKA_VERSION jars")
fi

# helm is not installed here: only the chart tests need it, and `make test-unit` installs it
# when missing (deploy/local/ensure-helm.sh); `make up` and `make demo` never use it.

if ((${#did[@]})); then
    summary="$(printf '%s; ' "${did[@]}")"
    say "bootstrap done in $(elapsed "$t0")s: ${summary%; }"
else
    say "bootstrap: everything present ($(elapsed "$t0")s)"
fi
