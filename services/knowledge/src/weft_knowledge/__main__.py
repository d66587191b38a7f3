"""``python -m weft_knowledge`` (the service) or ``python -m weft_knowledge worker`` (an
ingestion worker)."""

import sys

from weft_platform.app import run_service

from weft_knowledge.app import create_app, create_worker_app

WORKER_ARG = "worker"
"""The argument that starts an ingestion worker instead of the service."""


def main(argv: list[str] | None = None) -> None:
    """Run the service, or a worker with ``worker``."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] not in (WORKER_ARG, "serve"):
        sys.exit(f"usage: python -m weft_knowledge [serve|{WORKER_ARG}] (not {args[0]!r})")
    app = create_worker_app() if args[:1] == [WORKER_ARG] else create_app()
    run_service(app, app.state.runtime)


if __name__ == "__main__":
    main()
