# shellcheck shell=bash
# Weft local stack: default settings, sourced by bootstrap.sh, infra.sh and services.sh.
#
# Every value is only a default: a variable already set in the caller's environment wins
# (e.g. `WEFT_KAFKA_PORT=29092 make infra-up`). Values are exported so that the Python
# processes started by services.sh see them.

# Repository root (this file lives in <repo>/deploy/local/).
WEFT_REPO="${WEFT_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)}"
export WEFT_REPO

# --- folders --------------------------------------------------------------------------------
# State of the local stack (gitignored): data/{kafka,postgres,redis}, logs/, run/ (pid files).
export WEFT_HOME="${WEFT_HOME:-$WEFT_REPO/.weft}"
# Downloads kept outside git: Kafka jars in $WEFT_CACHE/kafka-<version>/.
export WEFT_CACHE="${WEFT_CACHE:-${HOME:-/root}/.cache/weft}"
export WEFT_KAFKA_VERSION="${WEFT_KAFKA_VERSION:-4.1.1}"
# log4j2 version for the slf4j binding; must match the log4j-core that Kafka depends on.
export WEFT_LOG4J_VERSION="${WEFT_LOG4J_VERSION:-2.24.3}"

# --- service credentials ---------------------------------------------------------------------
# Development key pairs are generated into $WEFT_HOME/credentials at first start
# (weft_platform.credentials); a deployment provides its own keys and leaves this off.
export WEFT_CREDENTIALS_DEV_KEYS="${WEFT_CREDENTIALS_DEV_KEYS:-true}"

# --- infrastructure ports (all on 127.0.0.1) ---------------------------------------------------
export WEFT_KAFKA_PORT="${WEFT_KAFKA_PORT:-19092}"
export WEFT_KAFKA_CONTROLLER_PORT="${WEFT_KAFKA_CONTROLLER_PORT:-19093}"
export WEFT_PG_PORT="${WEFT_PG_PORT:-15432}"
export WEFT_REDIS_PORT="${WEFT_REDIS_PORT:-16379}"

# Kafka JVM: ~512 MiB heap; C1 only (-XX:TieredStopAtLevel=1) starts faster on 2 cores.
export WEFT_KAFKA_HEAP_OPTS="${WEFT_KAFKA_HEAP_OPTS:--Xms512m -Xmx512m}"
export WEFT_KAFKA_JVM_OPTS="${WEFT_KAFKA_JVM_OPTS:--XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:TieredStopAtLevel=1 -Djava.awt.headless=true}"
# The local broker's listener: sasl (SCRAM-SHA-512 logins and ACLs, one user per service;
# the default) or plaintext (anyone may do anything). Chosen at storage format: a data dir
# of the other mode is formatted again (docs/kafka-local.md).
export WEFT_KAFKA_SECURITY="${WEFT_KAFKA_SECURITY:-sasl}"
# Seconds to wait for Kafka to answer an admin request after start.
export WEFT_KAFKA_START_TIMEOUT="${WEFT_KAFKA_START_TIMEOUT:-90}"
# Partitions per application topic (read by `python -m weft_platform.topics ensure`).
export WEFT_TOPIC_PARTITIONS="${WEFT_TOPIC_PARTITIONS:-6}"

# --- service ports ------------------------------------------------------------------------------
export WEFT_SCRIPTED_LLM_PORT="${WEFT_SCRIPTED_LLM_PORT:-8090}"
export WEFT_SCRIPTED_LLM_POLICY="${WEFT_SCRIPTED_LLM_POLICY:-demo}"
export WEFT_GATEWAY_PORT="${WEFT_GATEWAY_PORT:-8080}"
# The web console's built assets (deploy/local/ensure-console.sh builds them from console/),
# served by the gateway at / (docs/console.md).
export WEFT_CONSOLE_DIR="${WEFT_CONSOLE_DIR:-$WEFT_REPO/console/dist}"
export WEFT_AGENT_CONFIG_PORT="${WEFT_AGENT_CONFIG_PORT:-8081}"
export WEFT_ENGINE_PORT="${WEFT_ENGINE_PORT:-8082}"
# First tool-exec process; process i (0-based) of TOOL_WORKERS listens on this + 100*i.
export WEFT_TOOL_EXEC_PORT="${WEFT_TOOL_EXEC_PORT:-8083}"
export WEFT_SANDBOX_PORT="${WEFT_SANDBOX_PORT:-8084}"
export WEFT_MEMORY_PORT="${WEFT_MEMORY_PORT:-8085}"
export WEFT_SUGGESTIONS_PORT="${WEFT_SUGGESTIONS_PORT:-8086}"
export WEFT_KNOWLEDGE_PORT="${WEFT_KNOWLEDGE_PORT:-8088}"
# knowledge's ingestion workers (`python -m weft_knowledge worker`); worker i (0-based) of
# INGESTION_WORKERS listens (health, metrics at +1000) on this + 100*i.
export WEFT_KNOWLEDGE_WORKER_PORT="${WEFT_KNOWLEDGE_WORKER_PORT:-8188}"
export INGESTION_WORKERS="${INGESTION_WORKERS:-1}"
export TOOL_WORKERS="${TOOL_WORKERS:-1}"
# The gateway's projector (agent events -> Redis Streams): "embedded" in the gateway process
# (default: one process fewer on a small machine), or "separate": its own process
# (`python -m weft_gateway projector` on WEFT_PROJECTOR_PORT) and the gateway started with
# WEFT_PROJECTOR=off, the better layout for many SSE clients (docs/operations.md).
export PROJECTOR="${PROJECTOR:-embedded}"
export WEFT_PROJECTOR_PORT="${WEFT_PROJECTOR_PORT:-8087}"
# Seconds to wait for every service's GET /readyz to answer 200.
export WEFT_SERVICES_READY_TIMEOUT="${WEFT_SERVICES_READY_TIMEOUT:-60}"

# --- environment of every service ---------------------------------------------------------------
# Real provider mode: when the caller sets OPENAI_BASE_URL to something other than the
# scripted test-double server, services.sh does not start scripted-llm.
WEFT_SCRIPTED_LLM_URL="http://127.0.0.1:${WEFT_SCRIPTED_LLM_PORT}/v1"
export WEFT_SCRIPTED_LLM_URL
case "${OPENAI_BASE_URL:-}" in
    "" | "$WEFT_SCRIPTED_LLM_URL" | "$WEFT_SCRIPTED_LLM_URL/" | "http://localhost:${WEFT_SCRIPTED_LLM_PORT}/v1" | "http://localhost:${WEFT_SCRIPTED_LLM_PORT}/v1/")
        WEFT_LLM_MODE=scripted ;;
    *)
        WEFT_LLM_MODE=real ;;
esac
export WEFT_LLM_MODE

export WEFT_KAFKA_BOOTSTRAP="${WEFT_KAFKA_BOOTSTRAP:-127.0.0.1:${WEFT_KAFKA_PORT}}"
# The migration owner role (owns every table; migrations and tests use it, no service does).
export WEFT_DATABASE_URL="${WEFT_DATABASE_URL:-postgresql+asyncpg://weft:weft@127.0.0.1:${WEFT_PG_PORT}/weft}"
# Each service's own role, with rights on its own tables only (weft_storage.ownership);
# services.sh hands each process its URL as WEFT_DATABASE_URL (knowledge's ingestion workers
# knowledge's; the engine, which opens no database, none). infra.sh creates the roles
# (password: the role's name).
for _svc in gateway agent_config memory knowledge sandbox suggestions tool_exec; do
    _var="WEFT_${_svc^^}_DATABASE_URL"
    export "$_var=${!_var:-postgresql+asyncpg://weft_${_svc}:weft_${_svc}@127.0.0.1:${WEFT_PG_PORT}/weft}"
done
unset _svc _var
export WEFT_REDIS_URL="${WEFT_REDIS_URL:-redis://127.0.0.1:${WEFT_REDIS_PORT}/0}"
export OPENAI_BASE_URL="${OPENAI_BASE_URL:-$WEFT_SCRIPTED_LLM_URL}"
export OPENAI_API_KEY="${OPENAI_API_KEY:-scripted-llm-test-double}"
export WEFT_LLM_MODEL="${WEFT_LLM_MODEL:-weft-scripted}"
export WEFT_EMBEDDING_MODEL="${WEFT_EMBEDDING_MODEL:-weft-scripted-embed}"
export WEFT_MEMORY_URL="${WEFT_MEMORY_URL:-http://127.0.0.1:${WEFT_MEMORY_PORT}}"
export WEFT_AGENT_CONFIG_URL="${WEFT_AGENT_CONFIG_URL:-http://127.0.0.1:${WEFT_AGENT_CONFIG_PORT}}"
export WEFT_SUGGESTIONS_URL="${WEFT_SUGGESTIONS_URL:-http://127.0.0.1:${WEFT_SUGGESTIONS_PORT}}"
# memory's fork and rollback ask the sandbox (it owns the workspace checkpoints).
export WEFT_SANDBOX_URL="${WEFT_SANDBOX_URL:-http://127.0.0.1:${WEFT_SANDBOX_PORT}}"
export WEFT_KNOWLEDGE_URL="${WEFT_KNOWLEDGE_URL:-http://127.0.0.1:${WEFT_KNOWLEDGE_PORT}}"
# memory's prompt timer renews an expired prompt's turn credential at the gateway.
export WEFT_GATEWAY_URL="${WEFT_GATEWAY_URL:-http://127.0.0.1:${WEFT_GATEWAY_PORT}}"
export WEFT_DEV_API_KEY="${WEFT_DEV_API_KEY:-weft-dev-key}"
export WEFT_DEV_TENANT="${WEFT_DEV_TENANT:-demo}"
export WEFT_LOG_FORMAT="${WEFT_LOG_FORMAT:-json}"

# Python of the uv workspace.
export WEFT_PYTHON="${WEFT_PYTHON:-$WEFT_REPO/.venv/bin/python}"
