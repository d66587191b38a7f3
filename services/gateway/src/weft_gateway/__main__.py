"""``python -m weft_gateway`` (public API, SSE, the admin API on ``WEFT_ADMIN_PORT`` when
set and, unless ``WEFT_PROJECTOR=off``, the projector) or ``python -m weft_gateway
projector`` (the projector alone)."""

import sys

from weft_platform.app import run_service

from weft_gateway.app import create_app, create_projector_app
from weft_gateway.slow_clients import header_deadline_protocol
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
    settings = app.state.runtime.settings
    # SSE responses write frames straight to uvicorn's transport (see sse_response); the
    # protocol is uvicorn's httptools one with a header-read timeout (slow_clients).
    protocol = header_deadline_protocol(settings.header_read_timeout_s)
    # WEFT_ADMIN_PORT: a second listener of the same app, for /admin/v1 alone (admin_port).
    admin = [settings.admin_port] if settings.admin_port is not None else []
    run_service(ExposeServerSend(app), app.state.runtime, http=protocol, extra_ports=admin)


if __name__ == "__main__":
    main()
