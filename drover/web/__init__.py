"""drover's read-only web dashboard (``drover serve``, ``drover run --http``).

:func:`create_app` builds it. The rest is what a plugin's pages and JSON
endpoints use (``drover_register_web``): :func:`dashboard_of` (the
:class:`Dashboard` of the request: ``repo``, its read-only queries; ``kinds``;
``now()``), :func:`page` (a template rendered in drover's layout) and
:func:`bad_request` (a 400, as JSON or as the error page). Raising
``starlette.exceptions.HTTPException`` answers ``{"error": detail}`` under
``/api/`` and the error page elsewhere.
"""

from drover.web.app import create_app
from drover.web.dashboard import Dashboard, bad_request, dashboard_of, page

__all__ = ["Dashboard", "bad_request", "create_app", "dashboard_of", "page"]
