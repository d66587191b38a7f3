# Weft developer entry points. `make help` lists the targets. Every target is idempotent.
# The local stack runs as plain processes (no Docker): see docs/operations.md.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

# Number of tool-exec processes for `make up` (ports 8083, 8183, 8283, ...).
TOOL_WORKERS ?= 1
export TOOL_WORKERS
# The gateway's projector for `make up`: embedded in the gateway, or separate (its own
# process, gateway-projector on port 8087; better SSE latency with many clients).
PROJECTOR ?= embedded
export PROJECTOR
WEFT_HOME ?= $(CURDIR)/.weft
export WEFT_HOME

VENV := .venv/bin
PY := $(VENV)/python
# Each suite's tmp_path under WEFT_HOME, not /tmp/pytest-of-<user>: a /tmp left by another
# user or run (wrong owner) makes pytest refuse every tmp_path.
BASETEMP = --basetemp=$(shell mkdir -p $(WEFT_HOME)/pytest && echo $(WEFT_HOME))/pytest/$(1)
LOCAL := deploy/local
# pytest-xdist workers of the infrastructure suites (tests/parallel.py says what they share).
TEST_WORKERS ?= 2
XDIST = -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

.PHONY: help bootstrap infra-up infra-down infra-status up down status logs proto lint \
	typecheck test-unit test-integration test-timings test-chaos test-chaos-full test-full test demo bench \
	console test-browser-full

help: ## List the targets
	@echo "Weft make targets (variables: TOOL_WORKERS=$(TOOL_WORKERS), WEFT_HOME=$(WEFT_HOME)):"
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-z-]*:.*## / {printf "  %-17s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

bootstrap: ## Install what is missing (postgresql, redis, uv, .venv via uv sync, Kafka jars)
	@$(LOCAL)/bootstrap.sh

infra-up: ## Start Kafka, PostgreSQL and Redis (reuses running ones) and ensure Kafka topics
	@$(LOCAL)/infra.sh up

infra-down: ## Stop Kafka, PostgreSQL and Redis
	@$(LOCAL)/infra.sh down

infra-status: ## Show whether Kafka, PostgreSQL and Redis are up
	@$(LOCAL)/infra.sh status || true

up: ## bootstrap + infra-up + start all services and wait for /readyz (TOOL_WORKERS=N, PROJECTOR=separate)
	@$(LOCAL)/bootstrap.sh
	@$(LOCAL)/ensure-console.sh
	@$(LOCAL)/infra.sh up
	@$(LOCAL)/services.sh up

down: ## Stop the services, then the infrastructure
	@$(LOCAL)/services.sh down
	@$(LOCAL)/infra.sh down

status: ## Show infrastructure and services
	@$(LOCAL)/infra.sh status || true
	@$(LOCAL)/services.sh status || true

logs: ## Follow all logs in .weft/logs (Ctrl-C to stop)
	@ls $(WEFT_HOME)/logs/*.log >/dev/null 2>&1 || { echo "[weft] no logs in $(WEFT_HOME)/logs yet"; exit 0; }
	@tail -n 20 -F $(WEFT_HOME)/logs/*.log

proto: ## Generate proto/ from the contracts (weft_contracts.generate)
	@$(PY) -m weft_contracts.generate proto/

lint: ## ruff check + ruff format --check + lint-imports (the import contracts in .importlinter)
	@rc=0; $(VENV)/ruff check . || rc=1; $(VENV)/ruff format --check . || rc=1; \
	$(VENV)/lint-imports --no-logo || rc=1; exit $$rc

typecheck: ## mypy on libs, services, testing, tests
	@$(VENV)/mypy libs services testing tests

test-unit: ## Unit tests (no infrastructure needed; installs helm first if missing, for the chart tests)
	@$(LOCAL)/ensure-helm.sh
	@$(VENV)/pytest tests/unit -q -n 2 $(call BASETEMP,unit)

test-integration: ## Integration, e2e, security and (reduced) browser tests on the real infra, TEST_WORKERS in parallel (runs infra-up first)
	@$(LOCAL)/infra.sh up
	@$(LOCAL)/ensure-console.sh --browser
	@$(VENV)/pytest tests/integration tests/e2e tests/security tests/browser -q $(XDIST) --durations=15 $(call BASETEMP,integration)

test-timings: ## Measure each test group's seconds into tests/timings.json (the order groups start in)
	@$(LOCAL)/infra.sh up
	@WEFT_TEST_TIMINGS_OUT=tests/timings.json $(VENV)/pytest tests/integration tests/e2e tests/security \
		-q $(XDIST) $(call BASETEMP,integration)

test-chaos: ## Fault suite, reduced (8 sessions x 2 turns, 6 faults) on its own Kafka and Redis
	@$(LOCAL)/infra.sh up
	@$(VENV)/pytest tests/chaos -q $(call BASETEMP,chaos)

test-chaos-full: ## Fault suite, full (40 sessions x 3 turns, every fault; 5-15 min)
	@$(LOCAL)/infra.sh up
	@WEFT_CHAOS_SESSIONS=40 WEFT_CHAOS_TURNS=3 WEFT_CHAOS_FAULTS=all WEFT_CHAOS_PROMPT_SESSIONS=20 $(VENV)/pytest tests/chaos -q $(call BASETEMP,chaos)

test-full: ## make test, then the full fault suite (test-chaos-full) and the full browser run
	@$(MAKE) test
	@$(MAKE) test-chaos-full
	@$(MAKE) test-browser-full

console: ## Build the web console (console/ -> console/dist; npm ci + vite) and install chromium for its tests
	@$(LOCAL)/ensure-console.sh --browser

test-browser-full: ## Every browser test of the console (tests/browser; reduced set in test-integration)
	@$(LOCAL)/infra.sh up
	@$(LOCAL)/ensure-console.sh --browser
	@WEFT_BROWSER_FULL=1 $(VENV)/pytest tests/browser -q $(call BASETEMP,browser)

test: ## What CI runs: bootstrap, lint, typecheck, test-unit, infra-up, then test-integration and test-chaos side by side; prints each step's time (deploy/local/test-steps.sh)
	@MAKE="$(MAKE)" $(LOCAL)/test-steps.sh

demo: ## bootstrap + up + run the gateway demo (weft_gateway.demo); prints the web console's URL
	@$(LOCAL)/bootstrap.sh
	@$(LOCAL)/ensure-console.sh
	@$(LOCAL)/infra.sh up
	@$(LOCAL)/services.sh up
	@$(PY) -m weft_gateway.demo

bench: ## Run the benchmarks (bench/run_all.py)
	@$(PY) bench/run_all.py
