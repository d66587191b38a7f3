# shellcheck shell=bash
# Helpers shared by the deploy/local scripts. Source env.sh first.

WEFT_LOGS="$WEFT_HOME/logs"
WEFT_RUN="$WEFT_HOME/run"
WEFT_DATA="$WEFT_HOME/data"

say() { printf '[weft] %s\n' "$*"; }
warn() { printf '[weft] WARNING: %s\n' "$*" >&2; }
die() {
    printf '[weft] ERROR: %s\n' "$*" >&2
    exit 1
}

# tail_log FILE [LINES]: show the end of a log on stderr (for failure messages).
tail_log() {
    local file="$1" lines="${2:-40}"
    if [[ -s "$file" ]]; then
        printf '[weft] ---- last %s lines of %s ----\n' "$lines" "$file" >&2
        tail -n "$lines" "$file" >&2
        printf '[weft] ---- end of %s ----\n' "$file" >&2
    else
        printf '[weft] (log %s is empty or missing)\n' "$file" >&2
    fi
}

ensure_dirs() {
    mkdir -p "$WEFT_LOGS" "$WEFT_RUN" "$WEFT_DATA"
}

# port_open PORT: true when something accepts TCP connections on 127.0.0.1:PORT.
port_open() {
    timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
}

# read_pid PIDFILE: print the pid stored in PIDFILE (empty when none).
read_pid() {
    [[ -f "$1" ]] || return 0
    head -n 1 "$1" 2>/dev/null | tr -dc '0-9'
}

# pid_matches PID PATTERN: PID is alive and its command line contains PATTERN
# (guards against a stale pid file whose pid was reused by another program).
pid_matches() {
    local pid="$1" pattern="$2"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
    [[ -z "$pattern" ]] && return 0
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$pattern"
}

# running_pid PIDFILE PATTERN: print the pid when the process of PIDFILE runs, else fail.
running_pid() {
    local pid
    pid="$(read_pid "$1")"
    if pid_matches "$pid" "$2"; then
        echo "$pid"
        return 0
    fi
    return 1
}

# spawn PIDFILE LOGFILE CMD...: start CMD detached (own session, stdin from /dev/null,
# stdout+stderr appended to LOGFILE) and record its pid in PIDFILE.
spawn() {
    local pidfile="$1" logfile="$2"
    shift 2
    rm -f "$pidfile"
    printf '\n===== %s starting: %s =====\n' "$(date '+%Y-%m-%d %H:%M:%S')" "$*" >>"$logfile"
    # The inner shell writes its own pid, then execs CMD, so the pid file holds CMD's pid
    # even if setsid has to fork.
    # shellcheck disable=SC2016 # $$ and $1 are for the inner shell
    setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' weft-spawn "$pidfile" "$@" \
        </dev/null >>"$logfile" 2>&1 9>&- &
    local i
    for i in $(seq 1 50); do
        [[ -s "$pidfile" ]] && return 0
        sleep 0.1
    done
    die "could not start: $* (no pid file $pidfile)"
}

# stop_pid NAME PIDFILE PATTERN [TIMEOUT] [SIGNAL]: send SIGNAL (default TERM), wait up to
# TIMEOUT seconds (default 30) for the process to exit, then SIGKILL it.
stop_pid() {
    local name="$1" pidfile="$2" pattern="$3" timeout="${4:-30}" sig="${5:-TERM}" pid i
    pid="$(read_pid "$pidfile")"
    if ! pid_matches "$pid" "$pattern"; then
        rm -f "$pidfile"
        say "$name: not running"
        return 0
    fi
    kill "-$sig" "$pid" 2>/dev/null || true
    for ((i = 0; i < timeout * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        warn "$name (pid $pid) still running after ${timeout}s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.5
    fi
    rm -f "$pidfile"
    say "$name: stopped (pid $pid)"
}

now_s() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now_s)" 'BEGIN { printf "%.1f", b - a }'; }
