"""``python -m weft_sandbox``."""

from weft_platform.app import run_service

from weft_sandbox.app import create_app


def main() -> None:
    """Run the service."""
    app = create_app()
    run_service(app, app.state.runtime)


if __name__ == "__main__":
    main()
