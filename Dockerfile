# syntax=docker/dockerfile:1.7
#
# One image recipe for every Weft process, parameterised by the build arg SERVICE:
#
#   docker build --build-arg SERVICE=gateway -t weft/gateway .
#
# SERVICE is a directory name under services/ (gateway, agent-config, engine, tool-exec,
# sandbox, memory, suggestions, knowledge) or testing/ (scripted-llm, the LLM test double). The
# workspace package installed is `weft-$SERVICE` and the entrypoint is its console script
# `weft-$SERVICE`. Build context = repository root. Dependencies come from uv.lock only
# (`uv sync --frozen`), never re-resolved.
#
# One-shot jobs reuse a service image with another command (every service image ships
# weft_platform and weft_storage):
#   python -m weft_storage.migrate upgrade
#   python -m weft_platform.topics ensure --bootstrap kafka:9092

ARG PYTHON_IMAGE=python:3.11-slim

# --------------------------------------------------------------------------- builder
FROM ${PYTHON_IMAGE} AS builder

ARG SERVICE
ARG UV_VERSION=0.13.8
RUN test -n "${SERVICE}" || { echo "build arg SERVICE is required (e.g. --build-arg SERVICE=gateway)" >&2; exit 1; }

RUN pip install --no-cache-dir "uv==${UV_VERSION}"

# Use the image's interpreter (same path in the runtime stage), compile bytecode once,
# copy files out of the cache instead of hard-linking (the cache is a mount).
ENV UV_PYTHON_DOWNLOADS=never \
    UV_PYTHON=/usr/local/bin/python3.11 \
    UV_PROJECT_ENVIRONMENT=/app/.venv \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_FROZEN=1

WORKDIR /src

# 1) Dependency layer: only the lock and the workspace manifests, so source edits do not
#    invalidate the (slow) third-party install. Every member's pyproject.toml is needed for
#    uv to load the workspace, even for members this SERVICE does not use.
COPY pyproject.toml uv.lock ./
COPY libs/cli/pyproject.toml libs/cli/pyproject.toml
COPY libs/context/pyproject.toml libs/context/pyproject.toml
COPY libs/contracts/pyproject.toml libs/contracts/pyproject.toml
COPY libs/llm/pyproject.toml libs/llm/pyproject.toml
COPY libs/platform/pyproject.toml libs/platform/pyproject.toml
COPY libs/storage/pyproject.toml libs/storage/pyproject.toml
COPY libs/tools/pyproject.toml libs/tools/pyproject.toml
COPY libs/tool-catalog/pyproject.toml libs/tool-catalog/pyproject.toml
COPY libs/mcp-client/pyproject.toml libs/mcp-client/pyproject.toml
COPY services/agent-config/pyproject.toml services/agent-config/pyproject.toml
COPY services/engine/pyproject.toml services/engine/pyproject.toml
COPY services/gateway/pyproject.toml services/gateway/pyproject.toml
COPY services/memory/pyproject.toml services/memory/pyproject.toml
COPY services/sandbox/pyproject.toml services/sandbox/pyproject.toml
COPY services/suggestions/pyproject.toml services/suggestions/pyproject.toml
COPY services/knowledge/pyproject.toml services/knowledge/pyproject.toml
COPY services/tool-exec/pyproject.toml services/tool-exec/pyproject.toml
COPY testing/scripted-llm/pyproject.toml testing/scripted-llm/pyproject.toml
COPY testing/testkit/pyproject.toml testing/testkit/pyproject.toml
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-install-workspace --package "weft-${SERVICE}"

# 2) Workspace layer: the sources, installed as regular (non-editable) wheels so the
#    runtime stage needs nothing but the virtualenv.
COPY libs/ libs/
COPY services/ services/
COPY testing/ testing/
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-editable --package "weft-${SERVICE}" \
    && test -x "/app/.venv/bin/weft-${SERVICE}" \
    && ln -s "/app/.venv/bin/weft-${SERVICE}" /app/.venv/bin/weft-service

# --------------------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE} AS runtime

ARG SERVICE
LABEL org.opencontainers.image.title="weft-${SERVICE}" \
      org.opencontainers.image.description="Weft ${SERVICE}"

ENV PATH=/app/.venv/bin:${PATH} \
    VIRTUAL_ENV=/app/.venv \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    WEFT_SERVICE_NAME=${SERVICE} \
    WEFT_HTTP_HOST=0.0.0.0 \
    WEFT_LOG_FORMAT=json \
    WEFT_CREDENTIALS_DIR=/var/lib/weft/credentials

# /var/lib/weft/credentials: service credential keys (a secret mounted there, or in compose
# a shared volume the services generate development keys into; docs/security.md).
RUN groupadd --system --gid 10001 weft \
    && useradd --system --uid 10001 --gid weft --home-dir /app --no-create-home \
       --shell /usr/sbin/nologin weft \
    && install -d -o 10001 -g 10001 -m 700 /var/lib/weft/credentials

# The sandbox keeps each session's workspace as git checkpoints, whichever backend runs its
# commands, and its local backend runs them under bubblewrap: those two only in its image.
RUN if [ "${SERVICE}" = "sandbox" ]; then \
        apt-get update \
        && apt-get install -y --no-install-recommends git bubblewrap \
        && rm -rf /var/lib/apt/lists/*; \
    fi

COPY --from=builder --chown=root:root /app/.venv /app/.venv

WORKDIR /app
USER 10001:10001

# Exec form: the service runs as PID 1 and receives SIGTERM directly (compose adds an init).
# `weft-service` is a symlink to the console script `weft-$SERVICE` made in the builder.
ENTRYPOINT ["weft-service"]
