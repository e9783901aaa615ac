"""The ``deployment`` and ``route`` kinds, and their registration.

A deployment is a service of N replicas; each replica is a route (child kind
``route``) that runs one session, linked to it (relation ``replica-of``).
What the engine does with their statuses is derived from the two
declarations below (:mod:`drover.model.kinds`).

The plugin manager always loads this module as the plugin
``drover.kinds.deployments``: its ``drover_register_kinds`` registers both
kinds, its ``drover_register_commands`` adds the deployment commands
(:mod:`drover.kinds.deployments.cli`) and its ``drover_register_web`` the
dashboard's deployment pages and JSON endpoints
(:mod:`drover.kinds.deployments.web`), as a plugin registers its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from drover.kinds.deployments.checks import check_deployment_spec
from drover.kinds.deployments.status import EndpointLifecycle, RouteStatus
from drover.model.kinds import EntityKind, Limit, TerminationRule
from drover.plugins.markers import hookimpl
from drover.plugins.registry import KindRegistry, WebRegistry

if TYPE_CHECKING:
    import click

__all__ = [
    "DEPLOYMENT",
    "ROUTE",
    "drover_register_commands",
    "drover_register_kinds",
    "drover_register_web",
]

_E, _R = EndpointLifecycle, RouteStatus
#: A service: N replicas of a command, each replica a route running one session.
DEPLOYMENT = EntityKind(
    "deployment",
    EndpointLifecycle,
    terminal={_E.DESTROYED},
    success={_E.DESTROYED},
    # limits.replicas: spec["replicas"] (drover deploy --replicas, drover scale).
    limits=(Limit("replicas", 1000, spec_key="replicas"),),
    dormant={_E.CREATED, _E.DEPLOYING},
    ends_on_request=True,
    check_spec=check_deployment_spec,
    termination=(
        # Destroying passes through DESTROYING, where the routes are drained.
        TerminationRule(
            _E.DESTROYING,
            {s for s in _E if s not in (_E.DESTROYING, _E.DESTROYED)},
            children=_R.TERMINATING,
            message="destroy requested",
        ),
    ),
)
#: One replica of a deployment; its session is linked to it (relation ``replica-of``).
ROUTE = EntityKind(
    "route",
    RouteStatus,
    terminal={_R.TERMINATED},
    parent="deployment",
    success={_R.TERMINATED},
    termination=(
        TerminationRule(
            _R.TERMINATING,
            {s for s in _R if s not in (_R.TERMINATING, _R.TERMINATED)},
            message="termination requested",
        ),
    ),
)


@hookimpl
def drover_register_kinds(register: KindRegistry) -> None:
    """Register ``deployment`` and its child kind ``route``."""
    register(DEPLOYMENT, ROUTE)


# First (tryfirst): drover's own commands are added even when a later plugin's
# hook raises, and a plugin may still replace one by adding a command of that name.
@hookimpl(tryfirst=True)
def drover_register_commands(cli: click.Group) -> None:
    """Add ``deploy``, ``deployments``, ``scale``, ``destroy`` and ``routes`` to ``drover``."""
    # Imported only now, as the command line is built: every plugin manager, the
    # daemon's and the harness's too, loads this module, and only the command line
    # needs the commands (and click).
    from drover.kinds.deployments.cli import COMMANDS

    for command in COMMANDS:
        cli.add_command(command)


# First (tryfirst), as the commands: drover's own pages are registered even when a
# later plugin's hook raises.
@hookimpl(tryfirst=True)
def drover_register_web(register: WebRegistry) -> None:
    """Add ``/deployments``, ``/deployments/{name}`` and ``/api/deployments…`` to the dashboard."""
    # Imported only now, as the dashboard is built: the pages import Starlette, which
    # every other plugin manager (the command line's, the daemon's) does without.
    from drover.kinds.deployments.web import register_web

    register_web(register)
