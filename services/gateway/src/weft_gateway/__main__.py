"""``python -m weft_gateway`` (public API, SSE and, unless ``WEFT_PROJECTOR=off``, the
projector) or ``python -m weft_gateway projector`` (the projector alone)."""

import sys

from weft_platform.app import run_service

from weft_gateway.app import create_app, create_projector_app

PROJECTOR_ARG = "projector"
"""The argument that runs the projector alone (docker-compose.yml, the Helm chart and
deploy/local/services.sh pass it)."""


def main() -> None:
    """Run the service, or its projector alone with the ``projector`` argument."""
    app = create_projector_app() if sys.argv[1:] == [PROJECTOR_ARG] else create_app()
    run_service(app, app.state.runtime)


if __name__ == "__main__":
    main()
