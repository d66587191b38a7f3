#!/usr/bin/env bash
# `make test`: every step of CI, timed. Runs each step even after a failure (one run shows
# every problem), prints each step's time and the total against the budget, and fails if
# any step did. The budget (docs/operations.md, "Test suite time") is a guide, not a test:
# a run over it says so and still passes when every step passed.
#
# Steps: bootstrap, lint, typecheck, test-unit, console, infra-up, then test-integration and
# test-chaos. The last two run at the same time: the fault suite has its own Kafka broker
# and Redis server (tests/chaos/conftest.py) and mostly waits on its faults, so it fits in
# the CPU the integration workers leave idle. Their output is kept apart and printed whole.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
MAKE="${MAKE:-make}"
BUDGET_S="${WEFT_TEST_BUDGET_S:-720}"
LOGS="${WEFT_HOME:-$PWD/.weft}/logs/make-test"
mkdir -p "$LOGS"

failed=()
times=()
step() {  # step NAME COMMAND...: run, time, remember a failure
    local name="$1" t0=$SECONDS rc=0
    shift
    echo "[weft] ===== $name ====="
    "$@" || rc=$?
    local took=$((SECONDS - t0))
    times+=("$name ${took}s")
    if ((rc == 0)); then
        echo "[weft] ===== $name: ok (${took}s) ====="
    else
        echo "[weft] ===== $name: FAILED (${took}s) ====="
        failed+=("$name")
    fi
    return "$rc"
}
background() {  # background NAME COMMAND...: run beside the next steps; finish NAME counts it
    local name="$1"
    shift
    (
        t0=$SECONDS
        rc=0
        "$@" >"$LOGS/$name.log" 2>&1 || rc=$?
        echo "$rc $((SECONDS - t0))" >"$LOGS/$name.rc"
    ) &
    echo "[weft] ===== $name: started alongside (output below when it ends) ====="
}
finish() {  # finish NAME: wait for the background step, print its output, time and result
    local name="$1" rc took
    wait
    read -r rc took <"$LOGS/$name.rc" || { rc=1 took=0; }
    echo "[weft] ===== $name ====="
    cat "$LOGS/$name.log"
    times+=("$name ${took}s")
    if ((rc == 0)); then
        echo "[weft] ===== $name: ok (${took}s) ====="
    else
        echo "[weft] ===== $name: FAILED (${took}s) ====="
        failed+=("$name")
    fi
}

start=$SECONDS
step bootstrap deploy/local/bootstrap.sh || { echo "[weft] make test FAILED: bootstrap"; exit 1; }
step lint "$MAKE" lint
step typecheck "$MAKE" typecheck
step test-unit "$MAKE" test-unit
step console "$MAKE" console  # the web console's build and chromium, for tests/browser
if step infra-up "$MAKE" infra-up; then
    background test-chaos "$MAKE" test-chaos
    step test-integration "$MAKE" test-integration
    finish test-chaos
else
    failed+=("test-integration, test-chaos (not run: no infra)")
fi
total=$((SECONDS - start))

echo "[weft] ===== make test: step times ====="
for entry in "${times[@]}"; do printf '[weft]   %-18s %6s\n' "${entry% *}" "${entry##* }"; done
printf '[weft]   %-18s %6s  (budget %ss: docs/operations.md, "Test suite time")\n' total "${total}s" "$BUDGET_S"
if ((total > BUDGET_S)); then
    echo "[weft] make test took ${total}s, over its ${BUDGET_S}s budget: find the step that grew"
fi
if ((${#failed[@]})); then
    echo "[weft] make test FAILED: ${failed[*]}"
    exit 1
fi
echo "[weft] make test: all steps passed"
