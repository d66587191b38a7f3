#!/usr/bin/env bash
# Local infrastructure of Weft as plain processes (no Docker): Apache Kafka (KRaft, one node),
# PostgreSQL (a project-owned cluster) and Redis, all on 127.0.0.1.
#
#   deploy/local/infra.sh up       start what is not running yet (reuses running ones)
#   deploy/local/infra.sh down     stop all three (SIGTERM, then wait)
#   deploy/local/infra.sh status   report; exit 0 when all three are up, 3 otherwise
#   deploy/local/infra.sh up kafka [postgres] [redis]   only some of them
#
# Settings: deploy/local/env.sh. State: $WEFT_HOME/{data,logs,run}. See docs/operations.md.
set -euo pipefail
# shellcheck source=env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# shellcheck source=lib.sh
source "$WEFT_REPO/deploy/local/lib.sh"

HERE="$WEFT_REPO/deploy/local"

# ================================================================================= Kafka ====

KAFKA_PID="$WEFT_RUN/kafka.pid"
KAFKA_LOG="$WEFT_LOGS/kafka.log"
KAFKA_DATA="$WEFT_DATA/kafka"
KAFKA_CONF="$WEFT_RUN/kafka.properties"
KAFKA_PATTERN="kafka.Kafka"
KAFKA_BOOTSTRAP_LOCAL="127.0.0.1:$WEFT_KAFKA_PORT"
# SCRAM users made at format ("principal password" lines; its presence marks a SASL data
# dir) and the super user's client settings (read by weft_testkit.infra_env and
# services.sh). Both are deleted with the data dir they belong to.
KAFKA_USERS="$WEFT_DATA/kafka-users"
KAFKA_CLIENT_ENV="$WEFT_DATA/kafka-client.env"

kafka_jars() {
    "$HERE/fetch-kafka.sh"
}

# The security of the data dir: none (not formatted), sasl (formatted with SCRAM users),
# plaintext (formatted without: also every data dir from before SASL was the default).
kafka_data_mode() {
    if [[ ! -f "$KAFKA_DATA/meta.properties" ]]; then
        echo none
    elif [[ -s "$KAFKA_USERS" ]]; then
        echo sasl
    else
        echo plaintext
    fi
}

kafka_admin_password() {
    awk '$1 == "weft-admin" { print $2 }' "$KAFKA_USERS"
}

# kafka_render_conf MODE: the broker's properties for a plaintext or a SASL data dir.
kafka_render_conf() {
    local mode="$1" tmp="$KAFKA_CONF.tmp" listener=PLAINTEXT
    [[ "$mode" == sasl ]] && listener=SASL_PLAINTEXT
    (
        umask 077 # with SASL it holds the super user's password
        sed -e "s|@KAFKA_PORT@|$WEFT_KAFKA_PORT|g" \
            -e "s|@CONTROLLER_PORT@|$WEFT_KAFKA_CONTROLLER_PORT|g" \
            -e "s|@LOG_DIR@|$KAFKA_DATA|g" \
            -e "s|@LISTENER@|$listener|g" \
            "$HERE/kafka-server.properties.template" >"$tmp"
        if [[ "$mode" == sasl ]]; then
            sed -e "s|@ADMIN_PASSWORD@|$(kafka_admin_password)|g" \
                "$HERE/kafka-sasl.properties.template" >>"$tmp"
        fi
    )
    mv "$tmp" "$KAFKA_CONF"
}

# One SCRAM user per principal of weft_platform.kafka_acls (the ACL table) plus the super
# user, each with a random password; kept next to the data dir they were formatted into.
kafka_make_users() {
    (
        umask 077
        "$WEFT_PYTHON" - "$KAFKA_USERS.tmp" <<'PY'
import secrets
import sys

from weft_platform.kafka_acls import ACCESS, SUPER_USER

with open(sys.argv[1], "w") as out:
    for principal in (SUPER_USER, *ACCESS):
        out.write(f"{principal} {secrets.token_hex(24)}\n")
PY
    ) || die "kafka: could not write the SCRAM users ($WEFT_PYTHON, weft_platform.kafka_acls)"
    mv "$KAFKA_USERS.tmp" "$KAFKA_USERS"
}

# Principals of the ACL table added since the broker was formatted (a new service) get a
# SCRAM user on the running broker (Kafka's AlterUserScramCredentials, as the super user)
# and a line in $KAFKA_USERS: the upgrade path of an existing data dir.
kafka_add_missing_users() {
    [[ "$(kafka_data_mode)" == sasl ]] || return 0
    local missing principal password jars conf
    missing="$("$WEFT_PYTHON" - "$KAFKA_USERS" <<'PY'
import sys

from weft_platform.kafka_acls import ACCESS

have = {line.split()[0] for line in open(sys.argv[1]) if line.strip()}
print(" ".join(p for p in ACCESS if p not in have))
PY
)" || die "kafka: could not read the ACL table ($WEFT_PYTHON, weft_platform.kafka_acls)"
    [[ -n "$missing" ]] || return 0
    jars="$(kafka_jars)"
    conf="$(mktemp)"
    (
        umask 077
        printf '%s\n' "security.protocol=SASL_PLAINTEXT" "sasl.mechanism=SCRAM-SHA-512" \
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"weft-admin\" password=\"$(kafka_admin_password)\";" >"$conf"
    )
    for principal in $missing; do
        password="$("$WEFT_PYTHON" -c 'import secrets; print(secrets.token_hex(24))')"
        if ! java -cp "$jars/*" -Dlog4j2.configurationFile="$HERE/log4j2.properties" -Dweft.kafka.log.level=WARN \
            kafka.admin.ConfigCommand --bootstrap-server "$KAFKA_BOOTSTRAP_LOCAL" --command-config "$conf" \
            --alter --entity-type users --entity-name "$principal" \
            --add-config "SCRAM-SHA-512=[password=$password]" >>"$KAFKA_LOG" 2>&1; then
            rm -f "$conf"
            tail_log "$KAFKA_LOG"
            die "kafka: could not add the SCRAM user $principal"
        fi
        (umask 077 && echo "$principal $password" >>"$KAFKA_USERS")
        say "kafka: added the SCRAM user $principal (new in the ACL table)"
    done
    rm -f "$conf"
}

# The super user's client settings, for the topics job, tests and services.sh.
kafka_write_client_env() {
    local mode="$1"
    (
        umask 077
        {
            echo "WEFT_KAFKA_BOOTSTRAP=$KAFKA_BOOTSTRAP_LOCAL"
            if [[ "$mode" == sasl ]]; then
                echo "WEFT_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT"
                echo "WEFT_KAFKA_SASL_MECHANISM=SCRAM-SHA-512"
                echo "WEFT_KAFKA_USERNAME=weft-admin"
                echo "WEFT_KAFKA_PASSWORD=$(kafka_admin_password)"
            else
                echo "WEFT_KAFKA_SECURITY_PROTOCOL=PLAINTEXT"
            fi
        } >"$KAFKA_CLIENT_ENV.tmp"
    )
    mv "$KAFKA_CLIENT_ENV.tmp" "$KAFKA_CLIENT_ENV"
}

# A data dir formatted for the other mode is discarded (local data only: topics of dev and
# test runs), since SCRAM users can only be added at format.
kafka_reset_if_other_mode() {
    local want="$1" have
    have="$(kafka_data_mode)"
    [[ "$have" == none || "$have" == "$want" ]] && return 0
    warn "kafka: $KAFKA_DATA was formatted $have, WEFT_KAFKA_SECURITY=$want: discarding it and formatting again"
    rm -rf "$KAFKA_DATA" "$KAFKA_USERS" "$KAFKA_CLIENT_ENV"
}

# Format the storage once (idempotent: --ignore-formatted, and skipped when meta.properties
# exists, which saves a JVM start). With SASL, the SCRAM users are created here.
kafka_format() {
    local jars="$1" mode="$2" cluster_id principal password
    local scram=()
    mkdir -p "$KAFKA_DATA"
    [[ -f "$KAFKA_DATA/meta.properties" ]] && return 0
    cluster_id="$(java -cp "$jars/*" kafka.tools.StorageTool random-uuid 2>>"$KAFKA_LOG" | tail -n 1)"
    [[ -n "$cluster_id" ]] || {
        tail_log "$KAFKA_LOG"
        die "kafka: StorageTool random-uuid failed"
    }
    if [[ "$mode" == sasl ]]; then
        while read -r principal password; do
            scram+=(--add-scram "SCRAM-SHA-512=[name=$principal,password=$password]")
        done <"$KAFKA_USERS"
    fi
    if ! java -cp "$jars/*" -Dlog4j2.configurationFile="$HERE/log4j2.properties" -Dweft.kafka.log.level=WARN \
        kafka.tools.StorageTool format --ignore-formatted -t "$cluster_id" -c "$KAFKA_CONF" \
        "${scram[@]}" >>"$KAFKA_LOG" 2>&1; then
        tail_log "$KAFKA_LOG"
        rm -rf "$KAFKA_DATA"
        die "kafka: storage format failed (data dir $KAFKA_DATA)"
    fi
    say "kafka: formatted storage in $KAFKA_DATA (cluster id $cluster_id, $mode)"
}

# The topics step doubles as the readiness check: it needs a working admin connection.
topics_module_present() {
    local rc=0
    "$WEFT_PYTHON" -c "import importlib.util, sys
sys.exit(0 if importlib.util.find_spec('weft_platform.topics') else 3)" >/dev/null 2>&1 || rc=$?
    [[ $rc -ne 3 ]]
}

# One admin request through aiokafka (used only while weft_platform.topics does not exist).
kafka_admin_ping() {
    timeout 30 "$WEFT_PYTHON" - "$KAFKA_BOOTSTRAP_LOCAL" <<'PY'
import asyncio
import sys

from aiokafka.admin import AIOKafkaAdminClient


async def main() -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=sys.argv[1], request_timeout_ms=5000)
    await admin.start()
    try:
        await admin.describe_cluster()
        await admin.list_topics()
    finally:
        await admin.close()


asyncio.run(main())
PY
}

kafka_topics_step() {
    if topics_module_present; then
        # As the super user of this broker (it creates the ACLs too).
        (
            set -a
            # shellcheck source=/dev/null
            source "$KAFKA_CLIENT_ENV"
            set +a
            timeout 60 "$WEFT_PYTHON" -m weft_platform.topics ensure --bootstrap "$KAFKA_BOOTSTRAP_LOCAL"
        )
    else
        echo "weft_platform.topics is not importable yet: checked readiness with aiokafka only"
        kafka_admin_ping
    fi
}

# Wait until the broker answers admin requests and the topics exist.
kafka_wait_ready() {
    local t0="$1" deadline out pid attempts=0
    deadline=$(($(date +%s) + WEFT_KAFKA_START_TIMEOUT))
    out="$(mktemp)"
    while :; do
        pid="$(read_pid "$KAFKA_PID")"
        if ! pid_matches "$pid" "$KAFKA_PATTERN"; then
            tail_log "$KAFKA_LOG" 60
            rm -f "$out"
            die "kafka: the broker process exited during start-up (log: $KAFKA_LOG)"
        fi
        if port_open "$WEFT_KAFKA_PORT"; then
            attempts=$((attempts + 1))
            if kafka_topics_step >"$out" 2>&1; then
                break
            fi
        fi
        if (($(date +%s) >= deadline)); then
            tail_log "$KAFKA_LOG" 60
            if [[ -s "$out" ]]; then
                printf '[weft] ---- output of the last topics/readiness attempt ----\n' >&2
                tail -n 30 "$out" >&2
            fi
            rm -f "$out"
            die "kafka: not ready after ${WEFT_KAFKA_START_TIMEOUT}s on $KAFKA_BOOTSTRAP_LOCAL ($attempts admin attempts)"
        fi
        sleep 1
    done
    local topics_msg
    topics_msg="$(tail -n 1 "$out")"
    if grep -q "not importable yet" "$out"; then
        warn "kafka: weft_platform.topics is missing; no topics were created"
        topics_msg="no topics created"
    fi
    rm -f "$out"
    say "kafka: ready on $KAFKA_BOOTSTRAP_LOCAL in $(elapsed "$t0")s (${topics_msg:-topics ensured})"
}

kafka_up() {
    local t0 pid jars
    t0="$(now_s)"
    if pid="$(running_pid "$KAFKA_PID" "$KAFKA_PATTERN")"; then
        say "kafka: already running (pid $pid), reusing"
        local have
        have="$(kafka_data_mode)"
        [[ "$have" == "$WEFT_KAFKA_SECURITY" ]] ||
            warn "kafka: the running broker is $have, WEFT_KAFKA_SECURITY=$WEFT_KAFKA_SECURITY: run 'infra.sh down kafka' then 'up kafka' to switch"
        [[ -f "$KAFKA_CLIENT_ENV" ]] || kafka_write_client_env "$have"
        kafka_wait_ready "$t0"
        kafka_add_missing_users
        return 0
    fi
    if port_open "$WEFT_KAFKA_PORT" || port_open "$WEFT_KAFKA_CONTROLLER_PORT"; then
        port_owner "$WEFT_KAFKA_PORT" "$WEFT_KAFKA_CONTROLLER_PORT"
        die "kafka: port $WEFT_KAFKA_PORT or $WEFT_KAFKA_CONTROLLER_PORT is taken by a process that is not ours (set WEFT_KAFKA_PORT / WEFT_KAFKA_CONTROLLER_PORT)"
    fi
    command -v java >/dev/null 2>&1 || die "java not found: run make bootstrap"
    [[ -x "$WEFT_PYTHON" ]] || die "$WEFT_PYTHON not found: run make bootstrap"
    case "$WEFT_KAFKA_SECURITY" in
        sasl | plaintext) ;;
        *) die "WEFT_KAFKA_SECURITY=$WEFT_KAFKA_SECURITY: expected sasl or plaintext" ;;
    esac
    jars="$(kafka_jars)"
    kafka_reset_if_other_mode "$WEFT_KAFKA_SECURITY"
    if [[ "$WEFT_KAFKA_SECURITY" == sasl && "$(kafka_data_mode)" == none ]]; then
        kafka_make_users
    fi
    kafka_render_conf "$WEFT_KAFKA_SECURITY"
    kafka_format "$jars" "$WEFT_KAFKA_SECURITY"
    kafka_write_client_env "$WEFT_KAFKA_SECURITY"
    # shellcheck disable=SC2086 # the *_OPTS variables are word lists on purpose
    spawn "$KAFKA_PID" "$KAFKA_LOG" java $WEFT_KAFKA_HEAP_OPTS $WEFT_KAFKA_JVM_OPTS \
        -Dlog4j2.configurationFile="$HERE/log4j2.properties" \
        -Dkafka.logs.dir="$WEFT_LOGS" \
        -cp "$jars/*" kafka.Kafka "$KAFKA_CONF"
    say "kafka: started (pid $(read_pid "$KAFKA_PID")), waiting up to ${WEFT_KAFKA_START_TIMEOUT}s"
    kafka_wait_ready "$t0"
    kafka_add_missing_users
}

kafka_down() {
    # Controlled shutdown of a single combined node takes a few seconds.
    stop_pid kafka "$KAFKA_PID" "$KAFKA_PATTERN" 60
}

kafka_status() {
    local pid
    if pid="$(running_pid "$KAFKA_PID" "$KAFKA_PATTERN")" && port_open "$WEFT_KAFKA_PORT"; then
        say "kafka:    up    pid $pid  127.0.0.1:$WEFT_KAFKA_PORT (controller $WEFT_KAFKA_CONTROLLER_PORT)  data $KAFKA_DATA"
        return 0
    fi
    say "kafka:    DOWN  127.0.0.1:$WEFT_KAFKA_PORT${pid:+ (pid $pid alive, port closed)}"
    return 1
}

# ============================================================================ PostgreSQL ====

PG_PID="$WEFT_RUN/postgres.pid"
PG_LOG="$WEFT_LOGS/postgres.log"
PG_PATTERN="postgres"

pg_bin_dir() {
    if [[ -n "${WEFT_PG_BIN:-}" ]]; then
        echo "$WEFT_PG_BIN"
        return 0
    fi
    local ver
    ver="$(find /usr/lib/postgresql -mindepth 1 -maxdepth 1 -type d -printf '%f\n' 2>/dev/null |
        grep -E '^[0-9]+$' | sort -n | tail -n 1)"
    [[ -n "$ver" && -x "/usr/lib/postgresql/$ver/bin/initdb" ]] ||
        die "postgres: no /usr/lib/postgresql/<version>/bin/initdb (run make bootstrap, or set WEFT_PG_BIN)"
    echo "/usr/lib/postgresql/$ver/bin"
}

# PostgreSQL refuses to run as root: as root, run its programs as the `postgres` OS user.
as_pg() {
    if [[ $EUID -eq 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

# Where the cluster lives. Normally $WEFT_HOME/data/postgres and the socket in
# $WEFT_HOME/run/postgres. If the postgres user cannot traverse to $WEFT_HOME (e.g. the repo
# is under /root, mode 700), both go to /var/tmp/weft-<hash of $WEFT_HOME>/ instead.
pg_paths() {
    if [[ -n "${WEFT_PG_DATA:-}" ]]; then
        PG_DATA="$WEFT_PG_DATA"
        PG_SOCK="${WEFT_PG_SOCKET_DIR:-$(dirname "$WEFT_PG_DATA")/run}"
        return 0
    fi
    if [[ $EUID -ne 0 ]] || as_pg test -x "$WEFT_DATA" -a -x "$WEFT_RUN" 2>/dev/null; then
        PG_DATA="$WEFT_DATA/postgres"
        PG_SOCK="$WEFT_RUN/postgres"
    else
        local base
        base="/var/tmp/weft-$(printf '%s' "$WEFT_HOME" | sha1sum | cut -c1-12)"
        PG_DATA="$base/postgres"
        PG_SOCK="$base/run"
        PG_FALLBACK="$base"
    fi
}

pg_prepare_dirs() {
    if [[ -n "${PG_FALLBACK:-}" ]]; then
        mkdir -p "$PG_FALLBACK"
        chmod 755 "$PG_FALLBACK"
        echo "$WEFT_HOME" >"$PG_FALLBACK/weft-home"
        if [[ ! -e "$WEFT_DATA/postgres" ]]; then
            ln -s "$PG_DATA" "$WEFT_DATA/postgres"
        fi
    fi
    mkdir -p "$PG_DATA" "$PG_SOCK"
    chmod 700 "$PG_DATA"
    if [[ $EUID -eq 0 ]]; then
        chown postgres:postgres "$PG_SOCK"
        # -R only when needed (e.g. a machine where the postgres uid changed).
        if [[ "$(stat -c %U "$PG_DATA")" != postgres ]]; then
            chown -R postgres:postgres "$PG_DATA"
        fi
    fi
}

pg_psql() {
    as_pg "$PG_BIN/psql" -X -q -h "$PG_SOCK" -p "$WEFT_PG_PORT" -d postgres -v ON_ERROR_STOP=1
}

pg_ensure_role_db() {
    if ! pg_psql >>"$PG_LOG" 2>&1 <<'SQL'; then
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'weft') THEN
        CREATE ROLE weft LOGIN CREATEDB PASSWORD 'weft';
    ELSE
        ALTER ROLE weft LOGIN CREATEDB PASSWORD 'weft';
    END IF;
    -- database_query runs as this role (SET LOCAL ROLE); weft has no CREATEROLE, so the
    -- role is made here and migration 0007 only grants it views (docs/operations.md).
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'weft_sql_reader') THEN
        CREATE ROLE weft_sql_reader NOLOGIN NOINHERIT;
    END IF;
END
$$;
GRANT weft_sql_reader TO weft;
-- One login role per service (weft_storage.ownership.SERVICE_ROLES); weft (the migration
-- owner, no CREATEROLE) grants them their own tables after every migration. Locally each
-- password is the role's name (WEFT_<SERVICE>_DATABASE_URL in env.sh).
SELECT format(CASE WHEN EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r)
                   THEN 'ALTER ROLE %I LOGIN PASSWORD %L' ELSE 'CREATE ROLE %I LOGIN PASSWORD %L'
              END, r, r)
FROM unnest(ARRAY['weft_gateway', 'weft_agent_config', 'weft_memory', 'weft_knowledge',
                  'weft_sandbox', 'weft_suggestions', 'weft_tool_exec']) AS r\gexec
-- The engine's role of an earlier release (weft_storage.ownership.RETIRED_ROLES), NOLOGIN:
-- as in an upgraded cluster, so the test that every upgrade strips a retired role's rights
-- (tests/security/test_database_roles.py) runs on a fresh machine too.
SELECT 'CREATE ROLE weft_engine NOLOGIN'
WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'weft_engine')\gexec
-- database_query: tool-exec switches to the reader (SET LOCAL ROLE). NOINHERIT: as itself
-- it is not subject to the reader's row-level security (it would see no row at all).
ALTER ROLE weft_tool_exec NOINHERIT;
GRANT weft_sql_reader TO weft_tool_exec;
SELECT 'CREATE DATABASE weft OWNER weft'
WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_database WHERE datname = 'weft')\gexec
SQL
        tail_log "$PG_LOG"
        die "postgres: could not create role/database weft"
    fi
    # Per database, as the superuser: database_query's reader role may not call set_config,
    # with which SQL that got past the parse checks could change its tenant setting or switch
    # back to weft (docs/security.md). weft and the services' roles keep it: tool-exec sets
    # its settings before it switches to the reader, and asyncpg's type introspection (the
    # first query touching an array or tsvector column) calls set_config('jit', ...).
    if ! as_pg "$PG_BIN/psql" -X -q -h "$PG_SOCK" -p "$WEFT_PG_PORT" -d weft \
        -v ON_ERROR_STOP=1 >>"$PG_LOG" 2>&1 <<'SQL'; then
REVOKE EXECUTE ON FUNCTION pg_catalog.set_config(text, text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pg_catalog.set_config(text, text, boolean)
    TO weft, weft_gateway, weft_agent_config, weft_memory, weft_knowledge, weft_sandbox,
       weft_suggestions, weft_tool_exec;
SQL
        tail_log "$PG_LOG"
        die "postgres: could not revoke set_config from PUBLIC in database weft"
    fi
}

pg_running_pid() {
    local pid
    pid="$(head -n 1 "$PG_DATA/postmaster.pid" 2>/dev/null | tr -dc '0-9')" || true
    if pid_matches "$pid" "$PG_PATTERN"; then
        echo "$pid"
        return 0
    fi
    return 1
}

pg_up() {
    local t0 pid
    t0="$(now_s)"
    PG_BIN="$(pg_bin_dir)"
    pg_paths
    if pid="$(pg_running_pid)"; then
        echo "$pid" >"$PG_PID"
        say "postgres: already running (pid $pid), reusing"
        pg_ensure_role_db
        return 0
    fi
    if port_open "$WEFT_PG_PORT"; then
        port_owner "$WEFT_PG_PORT"
        die "postgres: port $WEFT_PG_PORT is taken by a process that is not ours (set WEFT_PG_PORT)"
    fi
    pg_prepare_dirs
    [[ -n "${PG_FALLBACK:-}" ]] &&
        say "postgres: the postgres user cannot reach $WEFT_DATA; using $PG_DATA"
    touch "$PG_LOG"
    if [[ ! -f "$PG_DATA/PG_VERSION" ]]; then
        if ! as_pg "$PG_BIN/initdb" -D "$PG_DATA" --encoding=UTF8 --locale=C \
            --auth-local=peer --auth-host=scram-sha-256 >>"$PG_LOG" 2>&1; then
            tail_log "$PG_LOG"
            die "postgres: initdb failed in $PG_DATA"
        fi
        echo "include_if_exists = 'weft.conf'" >>"$PG_DATA/postgresql.conf"
        say "postgres: initialised cluster in $PG_DATA"
    fi
    # Settings rewritten at every start, so port changes apply.
    cat >"$PG_DATA/weft.conf" <<EOF
# Written by deploy/local/infra.sh at every start; edits are lost.
listen_addresses = '127.0.0.1'
port = $WEFT_PG_PORT
unix_socket_directories = '$PG_SOCK'
max_connections = 300
# Dev/test cluster only: trade crash safety for speed. fsync=off can corrupt the cluster on
# an OS crash or power loss; that is fine for throwaway local data (rm -rf .weft), never
# for anything real.
fsync = off
synchronous_commit = off
full_page_writes = off
log_min_messages = warning
log_connections = off
log_disconnections = off
EOF
    [[ $EUID -eq 0 ]] && chown postgres:postgres "$PG_DATA/weft.conf"
    # pg_ctl's output and the server's stderr go to our log (opened here by this shell, so
    # the postgres user needs no write access to $WEFT_HOME/logs). pg_ctl puts the
    # postmaster in its own session (setsid), so it outlives this script.
    if ! as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -w -t 60 start \
        </dev/null >>"$PG_LOG" 2>&1 9>&-; then
        tail_log "$PG_LOG"
        die "postgres: pg_ctl start failed (data $PG_DATA, port $WEFT_PG_PORT)"
    fi
    pid="$(pg_running_pid)" || {
        tail_log "$PG_LOG"
        die "postgres: started but no running postmaster found"
    }
    echo "$pid" >"$PG_PID"
    pg_ensure_role_db
    say "postgres: ready on 127.0.0.1:$WEFT_PG_PORT in $(elapsed "$t0")s (pid $pid, data $PG_DATA)"
}

pg_down() {
    PG_BIN="$(pg_bin_dir)"
    pg_paths
    local pid
    if ! pid="$(pg_running_pid)"; then
        rm -f "$PG_PID"
        say "postgres: not running"
        return 0
    fi
    # -m fast: disconnect clients (SIGTERM to postgres would wait for every client to leave).
    if ! as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w -t 60 stop >>"$PG_LOG" 2>&1; then
        tail_log "$PG_LOG"
        die "postgres: pg_ctl stop failed"
    fi
    rm -f "$PG_PID"
    say "postgres: stopped (pid $pid)"
}

pg_status() {
    PG_BIN="$(pg_bin_dir)"
    pg_paths
    local pid
    if pid="$(pg_running_pid)" && port_open "$WEFT_PG_PORT"; then
        say "postgres: up    pid $pid  127.0.0.1:$WEFT_PG_PORT  data $PG_DATA"
        return 0
    fi
    say "postgres: DOWN  127.0.0.1:$WEFT_PG_PORT  data $PG_DATA"
    return 1
}

# ================================================================================= Redis ====

REDIS_PID="$WEFT_RUN/redis.pid"
REDIS_LOG="$WEFT_LOGS/redis.log"
REDIS_DATA="$WEFT_DATA/redis"
REDIS_PATTERN="redis-server"

redis_ping() {
    [[ "$(redis-cli -h 127.0.0.1 -p "$WEFT_REDIS_PORT" ping 2>/dev/null)" == "PONG" ]]
}

redis_up() {
    local t0 pid i
    t0="$(now_s)"
    command -v redis-server >/dev/null 2>&1 || die "redis-server not found: run make bootstrap"
    if pid="$(running_pid "$REDIS_PID" "$REDIS_PATTERN")"; then
        for i in $(seq 1 50); do
            redis_ping && break
            sleep 0.1
        done
        redis_ping || die "redis: pid $pid runs but does not answer PING on port $WEFT_REDIS_PORT"
        say "redis: already running (pid $pid), reusing"
        return 0
    fi
    if port_open "$WEFT_REDIS_PORT"; then
        port_owner "$WEFT_REDIS_PORT"
        die "redis: port $WEFT_REDIS_PORT is taken by a process that is not ours (set WEFT_REDIS_PORT)"
    fi
    mkdir -p "$REDIS_DATA"
    rm -f "$REDIS_PID"
    printf '\n===== %s starting redis-server =====\n' "$(date '+%Y-%m-%d %H:%M:%S')" >>"$REDIS_LOG"
    # Persistence as production runs it (docs/operations.md, "Redis"): an append-only file
    # in $REDIS_DATA, fsynced every second, so a restart keeps the turns' state (at most
    # the last second is lost; the engine's TurnAuditor ends what Redis no longer knows).
    # No RDB snapshots: the AOF is the one copy. redis-server writes to the log itself
    # once daemonized; the redirection only catches errors before that.
    # shellcheck disable=SC2094
    if ! redis-server --bind 127.0.0.1 --port "$WEFT_REDIS_PORT" --protected-mode yes \
        --daemonize yes --dir "$REDIS_DATA" --logfile "$REDIS_LOG" --pidfile "$REDIS_PID" \
        --save '' --appendonly yes --appendfsync everysec \
        </dev/null >>"$REDIS_LOG" 2>&1 9>&-; then
        tail_log "$REDIS_LOG"
        die "redis: redis-server failed to start"
    fi
    for i in $(seq 1 100); do
        redis_ping && break
        sleep 0.1
    done
    if ! redis_ping; then
        tail_log "$REDIS_LOG"
        die "redis: no PONG on 127.0.0.1:$WEFT_REDIS_PORT after 10s"
    fi
    say "redis: ready on 127.0.0.1:$WEFT_REDIS_PORT in $(elapsed "$t0")s (pid $(read_pid "$REDIS_PID"))"
}

redis_down() {
    stop_pid redis "$REDIS_PID" "$REDIS_PATTERN" 30
}

redis_status() {
    local pid
    if pid="$(running_pid "$REDIS_PID" "$REDIS_PATTERN")" && redis_ping; then
        say "redis:    up    pid $pid  127.0.0.1:$WEFT_REDIS_PORT"
        return 0
    fi
    say "redis:    DOWN  127.0.0.1:$WEFT_REDIS_PORT"
    return 1
}

# ================================================================================ common ====

# port_owner PORT...: tell who listens on the given ports (best effort).
port_owner() {
    local p
    for p in "$@"; do
        command -v ss >/dev/null 2>&1 && ss -ltnpH "sport = :$p" 2>/dev/null | sed 's/^/[weft]   /' >&2
    done
    return 0
}

# warn_ephemeral PORT...: a listening port inside the kernel's ephemeral range can be held by the
# local end of any outgoing connection, and the bind then fails although nothing listens.
warn_ephemeral() {
    local lo hi p
    read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || return 0
    for p in "$@"; do
        if ((p >= lo && p <= hi)); then
            say "WARNING: port $p lies in the ephemeral range $lo-$hi: an outgoing connection can hold it (docs/operations.md, Ports)"
        fi
    done
    return 0
}

lock() {
    # Serialise concurrent up/down calls. Children close fd 9 (see spawn and the 9>&- below).
    exec 9>"$WEFT_RUN/infra.lock"
    if command -v flock >/dev/null 2>&1 && ! flock -w 300 9; then
        die "another infra.sh holds $WEFT_RUN/infra.lock"
    fi
}

cmd="${1:-}"
shift || true
components=("$@")
[[ ${#components[@]} -gt 0 ]] || components=(redis postgres kafka)
for c in "${components[@]}"; do
    case "$c" in
        kafka | postgres | redis) ;;
        *) die "unknown component '$c' (kafka, postgres, redis)" ;;
    esac
done
fn_prefix() {
    case "$1" in
        postgres) echo pg ;;
        *) echo "$1" ;;
    esac
}

case "$cmd" in
    up)
        ensure_dirs
        lock
        t_all="$(now_s)"
        warn_ephemeral "$WEFT_KAFKA_PORT" "$WEFT_KAFKA_CONTROLLER_PORT" "$WEFT_PG_PORT" "$WEFT_REDIS_PORT"
        for c in "${components[@]}"; do
            "$(fn_prefix "$c")_up"
        done
        say "infra up in $(elapsed "$t_all")s (logs in $WEFT_LOGS)"
        ;;
    down)
        ensure_dirs
        lock
        rc=0
        # Kafka first (it is the slowest to stop), then the stores.
        for c in kafka postgres redis; do
            [[ " ${components[*]} " == *" $c "* ]] || continue
            "$(fn_prefix "$c")_down" || rc=1
        done
        exit "$rc"
        ;;
    status)
        ensure_dirs
        rc=0
        for c in kafka postgres redis; do
            [[ " ${components[*]} " == *" $c "* ]] || continue
            "$(fn_prefix "$c")_status" || rc=3
        done
        exit "$rc"
        ;;
    *)
        echo "usage: $0 up|down|status [kafka|postgres|redis ...]" >&2
        exit 2
        ;;
esac
