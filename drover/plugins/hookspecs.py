"""The hooks a drover plugin may implement. Each is a register-callback hook.

pluggy is used for discovery only: a hook hands the plugin a ``register``
callable (or the CLI group) and the plugin calls it. The coordinator itself
awaits handlers and observers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from drover.plugins.markers import hookspec

if TYPE_CHECKING:
    import click

    from drover.plugins.registry import (
        BackendRegistry,
        HandlerRegistry,
        KindRegistry,
        ObserverRegistry,
        WebRegistry,
    )

__all__ = [
    "drover_register_backends",
    "drover_register_commands",
    "drover_register_handlers",
    "drover_register_kinds",
    "drover_register_observers",
    "drover_register_web",
]


@hookspec
def drover_register_handlers(register: HandlerRegistry) -> None:
    """Register handler instances by calling ``register(handler, ...)``.

    ``register.context`` gives the runtime services (``queries``, ``backend``,
    ``clock``) for handlers that need them. Example::

        @hookimpl
        def drover_register_handlers(register):
            register(MyHandler(register.context.backend))
    """


@hookspec
def drover_register_kinds(register: KindRegistry) -> None:
    """Register entity kinds by calling ``register(EntityKind(...), ...)``.

    drover's own kinds are registered this way, by the packages of
    :mod:`drover.kinds` (``session`` and ``kernel``, ``deployment`` and ``route``).
    Handlers of a kind set ``kind = "<name>"``. Example::

        @hookimpl
        def drover_register_kinds(register):
            register(EntityKind("job", JobStatus, terminal={JobStatus.DONE, JobStatus.FAILED}))
    """


@hookspec
def drover_register_backends(register: BackendRegistry) -> None:
    """Register backends by calling ``register(name, factory)``.

    ``factory(config)`` receives the effective :class:`drover.config.Config`
    and returns an :class:`~drover.backends.base.AgentBackend`; its own
    settings come from the ``[backend.settings]`` table. Example::

        @hookimpl
        def drover_register_backends(register):
            register("k8s", lambda config: K8sBackend(**config.backend.settings))
    """


@hookspec
def drover_register_commands(cli: click.Group) -> None:
    """Add click commands to the ``drover`` command line with ``cli.add_command(...)``.

    drover's deployment commands come this way too (:mod:`drover.kinds.deployments`).

    Example::

        @hookimpl
        def drover_register_commands(cli):
            cli.add_command(my_report_command)
    """


@hookspec
def drover_register_observers(register: ObserverRegistry) -> None:
    """Register observers by calling ``register(observer)``.

    An observer has ``async def on_history(records)``; the daemon calls it
    after each committed tick with that tick's :class:`HistoryEvent` records.
    A slow or failing observer never delays the coordinator. Example::

        @hookimpl
        def drover_register_observers(register):
            register(SlackNotifier(webhook_url))
    """


@hookspec
def drover_register_web(register: WebRegistry) -> None:
    """Add dashboard pages and JSON endpoints with ``register.route(path, endpoint, ...)``.

    An endpoint is a Starlette endpoint, ``async def endpoint(request) -> Response``,
    served behind the dashboard's Host check, token gate and security headers.
    It reads through :mod:`drover.web`'s helpers: ``dashboard_of(request).repo``
    (read-only queries), ``page(request, template, context)``,
    ``bad_request(...)``, or raises ``HTTPException`` (a JSON error under
    ``/api/``, else the error page). ``nav="Label"`` adds a link to the top
    navigation; ``register.templates(directory)`` adds a template directory,
    searched after drover's own (a page may extend ``base.html``);
    ``register.colours({status: (background, text)})`` gives statuses their
    colours (badges, state-graph boxes).
    drover's deployment pages come this way too (:mod:`drover.kinds.deployments`).
    Example::

        from drover.web import dashboard_of, page

        async def jobs_page(request):
            jobs = await dashboard_of(request).repo.list_entities("job", limit=None)
            return page(request, "jobs.html", {"title": "Jobs", "jobs": jobs})

        @hookimpl
        def drover_register_web(register):
            register.templates(Path(__file__).parent / "templates")
            register.route("/jobs", jobs_page, name="jobs", nav="Jobs")
    """
