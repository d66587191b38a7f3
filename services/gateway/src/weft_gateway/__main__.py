"""``python -m weft_gateway`` (public API, SSE and, unless ``WEFT_PROJECTOR=off``, the
projector) or ``python -m weft_gateway projector`` (the projector alone)."""

import sys

from weft_platform.app import run_service

from weft_gateway.app import create_app, create_projector_app
from weft_gateway.sse_response import ExposeServerSend

PROJECTOR_ARG = "projector"
"""The argument that runs the projector alone (docker-compose.yml, the Helm chart and
deploy/local/services.sh pass it)."""


def main() -> None:
    """Run the service, or its projector alone with the ``projector`` argument."""
    if sys.argv[1:] == [PROJECTOR_ARG]:
        projector = create_projector_app()
        run_service(projector, projector.state.runtime)
        return
    app = create_app()
    # SSE responses write frames straight to uvicorn's transport (see sse_response).
    run_service(ExposeServerSend(app), app.state.runtime)


if __name__ == "__main__":
    main()
