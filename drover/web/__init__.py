"""drover's read-only web dashboard (``drover serve``, ``drover run --http``)."""

from drover.web.app import create_app

__all__ = ["create_app"]
