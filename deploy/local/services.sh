#!/usr/bin/env bash
# The Python processes of the Weft stack, in the background, on 127.0.0.1.
#
#   deploy/local/services.sh up       migrate the database, start what is not running, wait
#                                     until every GET /readyz answers 200
#   deploy/local/services.sh down     SIGTERM every service, wait, SIGKILL stragglers
#   deploy/local/services.sh status   report; exit 0 when every service is ready, 3 otherwise
#
# Needs the infrastructure (deploy/local/infra.sh up). Settings: deploy/local/env.sh
# (TOOL_WORKERS=N starts N tool-exec processes on ports 8083, 8183, 8283, ...;
# PROJECTOR=separate runs the gateway's projector as its own process, gateway-projector;
# INGESTION_WORKERS=N starts N knowledge ingestion workers, knowledge-worker, -2, ...).
# Logs: $WEFT_HOME/logs/<service>.log; pids: $WEFT_HOME/run/<service>.pid.
set -euo pipefail
# shellcheck source=env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# shellcheck source=lib.sh
source "$WEFT_REPO/deploy/local/lib.sh"

INFRA_NAMES=" kafka postgres redis "

[[ "$TOOL_WORKERS" =~ ^[1-9][0-9]*$ ]] || die "TOOL_WORKERS must be a positive integer (got '$TOOL_WORKERS')"
[[ "$INGESTION_WORKERS" =~ ^[1-9][0-9]*$ ]] ||
    die "INGESTION_WORKERS must be a positive integer (got '$INGESTION_WORKERS')"
[[ "$PROJECTOR" == embedded || "$PROJECTOR" == separate ]] ||
    die "PROJECTOR must be embedded or separate (got '$PROJECTOR')"

# The stack: "name module port" per line, in start order.
stack() {
    if [[ "$WEFT_LLM_MODE" == scripted ]]; then
        echo "scripted-llm weft_scripted_llm $WEFT_SCRIPTED_LLM_PORT"
    fi
    echo "agent-config weft_agent_config $WEFT_AGENT_CONFIG_PORT"
    echo "memory weft_memory $WEFT_MEMORY_PORT"
    echo "sandbox weft_sandbox $WEFT_SANDBOX_PORT"
    echo "knowledge weft_knowledge $WEFT_KNOWLEDGE_PORT"
    local i
    for ((i = 0; i < INGESTION_WORKERS; i++)); do
        echo "$(numbered knowledge-worker "$i") weft_knowledge $((WEFT_KNOWLEDGE_WORKER_PORT + 100 * i))"
    done
    for ((i = 0; i < TOOL_WORKERS; i++)); do
        echo "$(tool_exec_name "$i") weft_tool_exec $((WEFT_TOOL_EXEC_PORT + 100 * i))"
    done
    echo "engine weft_engine $WEFT_ENGINE_PORT"
    echo "suggestions weft_suggestions $WEFT_SUGGESTIONS_PORT"
    if [[ "$PROJECTOR" == separate ]]; then
        echo "gateway-projector weft_gateway $WEFT_PROJECTOR_PORT"
    fi
    echo "gateway weft_gateway $WEFT_GATEWAY_PORT"
}

# Environment and arguments that depend on the projector layout.
gateway_projector_mode() {
    if [[ "$PROJECTOR" == separate ]]; then echo off; else echo embedded; fi
}

# tool-exec, tool-exec-2, tool-exec-3, ...
tool_exec_name() {
    numbered tool-exec "$1"
}

# numbered NAME I: NAME for the first process (I = 0), NAME-2, NAME-3, ... after it.
numbered() {
    if (($2 == 0)); then echo "$1"; else echo "$1-$(($2 + 1))"; fi
}

ready() {
    curl -fsS -o /dev/null --max-time 2 "http://127.0.0.1:$1/readyz" 2>/dev/null
}

# kafka_login MODULE: the Kafka login of a service (weft_tool_exec logs in as weft-tool-exec,
# its principal in weft_platform.kafka_acls) as env assignments, when the local broker
# takes SASL logins (infra.sh wrote its users). Settings in the caller's environment win.
kafka_login() {
    local principal="${1//_/-}" client="$WEFT_DATA/kafka-client.env" users="$WEFT_DATA/kafka-users"
    local password
    [[ -z "${WEFT_KAFKA_SECURITY_PROTOCOL:-}" ]] || return 0
    grep -qx "WEFT_KAFKA_BOOTSTRAP=$WEFT_KAFKA_BOOTSTRAP" "$client" 2>/dev/null || return 0
    grep -qx "WEFT_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT" "$client" || return 0
    password="$(awk -v p="$principal" '$1 == p { print $2 }' "$users")"
    [[ -n "$password" ]] || {
        echo "no SCRAM user $principal in $users: format the broker again (infra.sh down kafka; rm -rf $WEFT_DATA/kafka; infra.sh up kafka)" >&2
        return 1
    }
    echo "WEFT_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT WEFT_KAFKA_USERNAME=$principal WEFT_KAFKA_PASSWORD=$password"
}

# The Fernet key agent-config encrypts MCP secrets with (WEFT_MCP_SECRET_KEYS, docs/mcp.md):
# made once into $WEFT_DATA/mcp-secret-keys (mode 600), like the other local secrets. A value
# in the caller's environment wins (a rollover: "NEW,OLD", then reencrypt-mcp).
mcp_secret_keys() {
    local file="$WEFT_DATA/mcp-secret-keys"
    if [[ ! -s "$file" ]]; then
        (
            umask 077
            "$WEFT_PYTHON" -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())' >"$file.tmp"
        ) || die "could not make the MCP secret key ($WEFT_PYTHON, cryptography)"
        mv "$file.tmp" "$file"
    fi
    export WEFT_MCP_SECRET_KEYS="${WEFT_MCP_SECRET_KEYS:-$(cat "$file")}"
}

# db_login MODULE: the service's own database URL (weft_tool_exec: WEFT_TOOL_EXEC_DATABASE_URL,
# env.sh) as WEFT_DATABASE_URL=..., so that no service runs as the migration owner. The
# engine has no role and gets none (its state is in Redis); start_one drops (env -u) the
# migration owner's URL env.sh exports, so no process inherits it.
db_login() {
    local svc="${1#weft_}"
    [[ "$svc" != engine ]] || return 0
    local var="WEFT_${svc^^}_DATABASE_URL"
    [[ -n "${!var:-}" ]] || { echo "$var is not set (deploy/local/env.sh)" >&2; return 1; }
    echo "WEFT_DATABASE_URL=${!var}"
}

start_one() {
    local name="$1" module="$2" port="$3" pid login=""
    local pidfile="$WEFT_RUN/$name.pid" logfile="$WEFT_LOGS/$name.log"
    if pid="$(running_pid "$pidfile" "-m $module")"; then
        say "$name: already running (pid $pid, port $port)"
        return 0
    fi
    if port_open "$port"; then
        die "$name: port $port is taken by a process that is not ours (another stack running?)"
    fi
    if [[ "$name" != scripted-llm ]]; then
        login="$(kafka_login "$module")" || die "$name: no Kafka login"
        login="$login $(db_login "$module")" || die "$name: no database URL"
    fi
    if [[ "$name" == scripted-llm ]]; then
        spawn "$pidfile" "$logfile" env -u WEFT_DATABASE_URL WEFT_SERVICE_NAME="$name" WEFT_HTTP_PORT="$port" \
            "$WEFT_PYTHON" -m "$module" serve --port "$port" --policy "$WEFT_SCRIPTED_LLM_POLICY"
    elif [[ "$name" == gateway-projector ]]; then
        # shellcheck disable=SC2086 # $login is a list of assignments (hex values)
        spawn "$pidfile" "$logfile" env -u WEFT_DATABASE_URL WEFT_SERVICE_NAME="$name" WEFT_HTTP_PORT="$port" $login \
            "$WEFT_PYTHON" -m "$module" projector
    elif [[ "$name" == knowledge-worker* ]]; then
        # shellcheck disable=SC2086
        spawn "$pidfile" "$logfile" env -u WEFT_DATABASE_URL WEFT_SERVICE_NAME=knowledge-worker WEFT_HTTP_PORT="$port" \
            $login "$WEFT_PYTHON" -m "$module" worker
    elif [[ "$name" == gateway ]]; then
        # shellcheck disable=SC2086
        spawn "$pidfile" "$logfile" env -u WEFT_DATABASE_URL WEFT_SERVICE_NAME="$name" WEFT_HTTP_PORT="$port" $login \
            WEFT_PROJECTOR="$(gateway_projector_mode)" "$WEFT_PYTHON" -m "$module"
    else
        # shellcheck disable=SC2086
        spawn "$pidfile" "$logfile" env -u WEFT_DATABASE_URL WEFT_SERVICE_NAME="$name" WEFT_HTTP_PORT="$port" $login \
            "$WEFT_PYTHON" -m "$module"
    fi
    say "$name: started (pid $(read_pid "$pidfile"), port $port)"
}

# Pid files of services (everything in run/ but the infrastructure's).
service_pidfiles() {
    local f name
    for f in "$WEFT_RUN"/*.pid; do
        [[ -e "$f" ]] || continue
        name="$(basename "$f" .pid)"
        [[ "$INFRA_NAMES" == *" $name "* ]] && continue
        echo "$f"
    done
}

# stop_many PIDFILE...: SIGTERM all of them at once, wait up to 20 s, SIGKILL the rest.
stop_many() {
    local f pid name i alive
    local -a pids=() names=()
    for f in "$@"; do
        name="$(basename "$f" .pid)"
        pid="$(read_pid "$f")"
        if pid_matches "$pid" "-m weft_"; then
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
            names+=("$name")
        fi
        rm -f "$f"
    done
    ((${#pids[@]})) || return 0
    for ((i = 0; i < 200; i++)); do
        alive=0
        for pid in "${pids[@]}"; do
            kill -0 "$pid" 2>/dev/null && alive=1
        done
        ((alive)) || break
        sleep 0.1
    done
    for i in "${!pids[@]}"; do
        if kill -0 "${pids[$i]}" 2>/dev/null; then
            warn "${names[$i]} (pid ${pids[$i]}) ignored SIGTERM for 20s; sending SIGKILL"
            kill -KILL "${pids[$i]}" 2>/dev/null || true
        fi
        say "${names[$i]}: stopped (pid ${pids[$i]})"
    done
}

services_up() {
    local t0 name module port f pid
    t0="$(now_s)"
    ensure_dirs
    [[ -x "$WEFT_PYTHON" ]] || die "$WEFT_PYTHON not found: run make bootstrap"
    if [[ "$WEFT_LLM_MODE" == real ]]; then
        say "real provider mode: OPENAI_BASE_URL=$OPENAI_BASE_URL (scripted-llm not started)"
        [[ "$OPENAI_API_KEY" != scripted-llm-test-double ]] ||
            warn "OPENAI_API_KEY is the test-double key; set your provider's key"
        [[ "$WEFT_LLM_MODEL" != weft-scripted ]] ||
            warn "WEFT_LLM_MODEL is 'weft-scripted'; set a model of your provider"
    fi

    # Fewer tool-exec or ingestion workers than last time: stop the extra ones.
    local -a extra=()
    local wanted
    wanted=" $(stack | awk '{print $1}' | tr '\n' ' ') "
    for f in "$WEFT_RUN"/tool-exec*.pid "$WEFT_RUN"/knowledge-worker*.pid; do
        [[ -e "$f" ]] || continue
        name="$(basename "$f" .pid)"
        [[ "$wanted" == *" $name "* ]] || extra+=("$f")
    done
    ((${#extra[@]} == 0)) || stop_many "${extra[@]}"
    # A running gateway keeps the projector layout it was started with: switching PROJECTOR
    # needs a restart of the gateway (make down && make up), else events could go unprojected.
    local gw_pid
    if gw_pid="$(running_pid "$WEFT_RUN/gateway.pid" "-m weft_gateway")"; then
        local running_mode=embedded
        [[ -e "$WEFT_RUN/gateway-projector.pid" ]] && running_mode=separate
        [[ "$running_mode" == "$PROJECTOR" ]] ||
            warn "gateway (pid $gw_pid) runs with PROJECTOR=$running_mode; make down, then make up PROJECTOR=$PROJECTOR to switch"
    fi

    mcp_secret_keys

    # Database schema first (idempotent).
    local mlog="$WEFT_LOGS/migrate.log"
    printf '\n===== %s migrate upgrade =====\n' "$(date '+%Y-%m-%d %H:%M:%S')" >>"$mlog"
    if ! "$WEFT_PYTHON" -m weft_storage.migrate upgrade </dev/null >>"$mlog" 2>&1; then
        tail_log "$mlog"
        die "database migration failed (python -m weft_storage.migrate upgrade; is the infra up?)"
    fi

    while read -r name module port; do
        start_one "$name" "$module" "$port"
    done < <(stack)

    # Wait until every /readyz answers 200.
    local deadline pending
    deadline=$(($(date +%s) + WEFT_SERVICES_READY_TIMEOUT))
    while :; do
        pending=()
        while read -r name module port; do
            pid="$(read_pid "$WEFT_RUN/$name.pid")"
            if ! pid_matches "$pid" "-m $module"; then
                tail_log "$WEFT_LOGS/$name.log"
                die "$name exited during start-up (log: $WEFT_LOGS/$name.log)"
            fi
            ready "$port" || pending+=("$name:$port")
        done < <(stack)
        ((${#pending[@]})) || break
        if (($(date +%s) >= deadline)); then
            for f in "${pending[@]}"; do
                name="${f%%:*}"
                printf '[weft] %s: GET http://127.0.0.1:%s/readyz -> %s\n' "$name" "${f##*:}" \
                    "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:${f##*:}/readyz" || true)" >&2
                tail_log "$WEFT_LOGS/$name.log" 30
            done
            die "not ready after ${WEFT_SERVICES_READY_TIMEOUT}s: ${pending[*]}"
        fi
        sleep 0.5
    done
    say "services ready in $(elapsed "$t0")s: gateway http://127.0.0.1:$WEFT_GATEWAY_PORT (logs in $WEFT_LOGS)"
}

services_down() {
    ensure_dirs
    local -a files=()
    mapfile -t files < <(service_pidfiles)
    if ((${#files[@]} == 0)); then
        say "services: none running"
        return 0
    fi
    stop_many "${files[@]}"
}

services_status() {
    ensure_dirs
    local rc=0 name module port pid state
    while read -r name module port; do
        pid="$(read_pid "$WEFT_RUN/$name.pid")"
        if ! pid_matches "$pid" "-m $module"; then
            state="DOWN"
            rc=3
        elif ready "$port"; then
            state="ready"
        else
            state="up, NOT READY"
            rc=3
        fi
        printf '[weft] %-17s %-14s pid %-8s http://127.0.0.1:%s\n' "$name" "$state" "${pid:--}" "$port"
    done < <(stack)
    return "$rc"
}

case "${1:-}" in
    up) services_up ;;
    down) services_down ;;
    status) services_status ;;
    *)
        echo "usage: $0 up|down|status" >&2
        exit 2
        ;;
esac
