"""Plugin loading and load-time validation of handlers."""

from __future__ import annotations

import re

import pytest
from scripted import Scripted, ScriptedPlugin

from drover import (
    InvalidHandlerError,
    KernelMatchType,
    KernelStatus,
    SessionPromotionHandler,
    SessionStatus,
    StatusTransitions,
    TransitionStatus,
    hookimpl,
)
from drover.testing import CoordinatorHarness

BUILTIN = {
    "schedule-sessions",
    "prepare-sessions",
    "start-sessions",
    "terminate-sessions",
    "promote-to-prepared",
    "promote-to-running",
    "promote-to-terminated",
    "detect-termination",
    "detect-start-failure",
}


def plugin_registering(*handlers: object) -> object:
    class Plugin:
        @hookimpl
        def drover_register_handlers(self, register):
            register(*handlers)

    return Plugin()


DEPLOYMENT_HANDLERS = {
    "check-pending-deployment",
    "scaling-deployment",
    "check-replica-deployment",
    "reconcile-deployment",
    "rollout-deployment",
    "destroying-deployment",
}
ROUTE_HANDLERS = {
    "provisioning-route",
    "health-check-route",
    "running-route",
    "route-eviction",
    "terminating-route",
}


async def test_builtins_are_nine_plugins_registered_through_the_hook():
    """The session lifecycle is nine plugins (the proposal's eight + detect-start-failure);
    deployments and routes are one plugin each, with the seed's five handlers each (and
    the deployments' rollout-deployment, drover's own)."""
    async with CoordinatorHarness() as h:
        assert set(h.handlers) == BUILTIN | DEPLOYMENT_HANDLERS | ROUTE_HANDLERS
        owners = {e.name: e.plugin for e in h.registered}
        assert {owners[name] for name in BUILTIN} == {f"drover.kinds.sessions.{n}" for n in BUILTIN}
        assert {owners[name] for name in DEPLOYMENT_HANDLERS} == {
            "drover.kinds.deployments.deployments"
        }
        assert {owners[name] for name in ROUTE_HANDLERS} == {"drover.kinds.deployments.routes"}
        assert {h.handlers[n].kind for n in DEPLOYMENT_HANDLERS} == {"deployment"}
        assert {h.handlers[n].kind for n in ROUTE_HANDLERS} == {"route"}


def test_builtin_kinds_are_registered_by_their_packages_through_the_hook():
    """drover's kinds come from its kind packages' drover_register_kinds, even without handlers."""
    from drover import make_plugin_manager
    from drover.plugins.registry import Registry, accept_kinds

    pm = make_plugin_manager(include_builtins=False)
    registry = Registry(pm, "drover_register_kinds", accept_kinds).call_hook()
    owners = [(entry.item.name, entry.plugin) for entry in registry]
    assert owners == [
        ("session", "drover.kinds.sessions"),
        ("kernel", "drover.kinds.sessions"),
        ("deployment", "drover.kinds.deployments"),
        ("route", "drover.kinds.deployments"),
    ]
    # They cannot be blocked: every drover has them.
    blocked = make_plugin_manager(block=["drover.kinds.sessions", "drover.kinds.deployments"])
    assert blocked.has_plugin("drover.kinds.sessions")
    assert blocked.has_plugin("drover.kinds.deployments")


def test_a_builtin_handler_plugin_is_blocked_by_its_full_or_short_name():
    """block= takes `drover.kinds.sessions.prepare-sessions` or `prepare-sessions` alike."""
    from drover import make_plugin_manager

    for name in ("prepare-sessions", "drover.kinds.sessions.prepare-sessions", "routes"):
        pm = make_plugin_manager(block=[name])
        loaded = {n for n, plugin in pm.list_name_plugin() if plugin is not None}
        assert not {n for n in loaded if n.rpartition(".")[2] == name.rpartition(".")[2]}
        assert "drover.kinds.sessions.start-sessions" in loaded


def test_the_plugin_manager_loads_only_what_it_is_handed():
    """drover.plugins knows no lifecycle: build_plugin_manager registers the plugins it is
    given, and blocks the other names of block= (an entry point, say)."""
    from drover.kinds.sessions import kinds as session_kinds
    from drover.plugins.manager import build_plugin_manager, collect_kinds

    assert list(collect_kinds(build_plugin_manager())) == []
    pm = build_plugin_manager(
        [("drover.kinds.sessions", session_kinds)], block=["drover.kinds.sessions", "other"]
    )
    assert list(collect_kinds(pm)) == ["session", "kernel"]
    assert pm.is_blocked("other")
    assert not pm.is_blocked("drover.kinds.sessions")


@pytest.mark.parametrize("module", ["drover.plugins", "drover.plugins.manager"])
def test_make_plugin_manager_where_it_was_still_works_and_names_its_new_place(module):
    """The old spelling warns (DeprecationWarning) naming drover.make_plugin_manager, and
    still builds a manager with drover's own plugins."""
    import importlib

    said = rf"^{module}\.make_plugin_manager is deprecated: use drover\.make_plugin_manager$"
    with pytest.warns(DeprecationWarning, match=said):
        old = importlib.import_module(module).make_plugin_manager
    pm = old(block=["prepare-sessions"])
    loaded = {name for name, plugin in pm.list_name_plugin() if plugin is not None}
    assert {"drover.backends", "drover.kinds.sessions"} <= loaded
    assert "drover.kinds.sessions.start-sessions" in loaded
    assert "drover.kinds.sessions.prepare-sessions" not in loaded


async def test_builtins_can_be_left_out_and_plugins_added():
    """include_builtin_handlers=False loads only the given plugins."""
    async with CoordinatorHarness(plugins=[ScriptedPlugin()], include_builtin_handlers=False) as h:
        assert set(h.handlers) == {"scripted"}


def _subclass(**attrs: object) -> type[Scripted]:
    return type("Broken", (Scripted,), attrs)


def _promotion(success: SessionStatus, targets: frozenset[SessionStatus]) -> object:
    class Promote(SessionPromotionHandler):
        @classmethod
        def name(cls) -> str:
            return "bad-promotion"

        @property
        def target_session_statuses(self) -> frozenset[SessionStatus]:
            return targets

        @property
        def check_kernel_statuses(self) -> frozenset[KernelStatus]:
            return frozenset({KernelStatus.RUNNING})

        @property
        def match_type(self) -> KernelMatchType:
            return KernelMatchType.ALL

        @classmethod
        def success_session_status(cls) -> SessionStatus:
            return success

    return Promote()


class _EmptyTargets(Scripted):
    @property
    def target_session_statuses(self) -> frozenset[SessionStatus]:
        return frozenset()


class _StringTargets(Scripted):
    @property
    def target_session_statuses(self) -> frozenset[SessionStatus]:
        return frozenset({"PENDING"})  # type: ignore[arg-type]


class _BadName(Scripted):
    @classmethod
    def name(cls) -> str:
        return "Bad_Name"


@pytest.mark.parametrize(
    ("handlers", "message"),
    [
        ((Scripted(), Scripted()), "duplicate handler name 'scripted'"),
        ((_EmptyTargets(),), "target_session_statuses is empty"),
        ((_StringTargets(),), "contains 'PENDING', which is not a SessionStatus"),
        ((_BadName(),), "name\\(\\) must return a kebab-case string"),
        (
            (
                _subclass(
                    transitions=StatusTransitions(success=TransitionStatus(session="DONE"))  # type: ignore[arg-type]
                )(),
            ),
            "status_transitions\\(\\).success.session is 'DONE', not a SessionStatus",
        ),
        (
            (_promotion(SessionStatus.RUNNING, frozenset({SessionStatus.RUNNING})),),
            "success_session_status\\(\\) RUNNING is one of its own target statuses",
        ),
        (
            (_subclass(options=Scripted.options.__class__(max_retries=-1))(),),
            "max_retries must be an integer >= 0",
        ),
        (
            (_subclass(options=Scripted.options.__class__(batch_size=0))(),),
            "batch_size must be an integer >= 1",
        ),
    ],
    ids=[
        "duplicate",
        "empty-targets",
        "not-an-enum",
        "not-kebab",
        "bad-transition",
        "promotion-into-own-target",
        "negative-retries",
        "zero-batch",
    ],
)
async def test_invalid_handler_sets_are_refused_naming_plugin_and_handler(handlers, message):
    """Load-time validation raises a clear error naming the problem."""
    with pytest.raises(InvalidHandlerError, match=message) as info:
        async with CoordinatorHarness(
            plugins=[plugin_registering(*handlers)], include_builtin_handlers=False
        ):
            pass
    assert "plugin" in str(info.value)


async def test_a_clash_with_a_builtin_names_both_plugins():
    """Registering a built-in's name again says who registered it first."""

    class Clash(Scripted):
        @classmethod
        def name(cls) -> str:
            return "schedule-sessions"

    with pytest.raises(
        InvalidHandlerError, match=re.escape("drover.kinds.sessions.schedule-sessions")
    ):
        async with CoordinatorHarness(plugins=[plugin_registering(Clash())]):
            pass


async def test_registering_a_class_instead_of_an_instance_is_explained():
    """register(MyHandler) instead of register(MyHandler()) gets a helpful error."""
    with pytest.raises(TypeError, match="register an instance"):
        async with CoordinatorHarness(
            plugins=[plugin_registering(Scripted)], include_builtin_handlers=False
        ):
            pass


async def test_a_misspelled_hook_is_an_error():
    """pm.check_pending() rejects hook implementations that match no hookspec."""

    class Typo:
        @hookimpl
        def drover_register_handler(self, register):  # missing "s"
            pass

    with pytest.raises(Exception, match="drover_register_handler"):
        async with CoordinatorHarness(plugins=[Typo()], include_builtin_handlers=False):
            pass


async def test_unknown_configuration_option_is_refused():
    """A configuration override with an unknown field names it."""
    with pytest.raises(InvalidHandlerError, match="unknown handler option"):
        async with CoordinatorHarness(handler_options={"prepare-sessions": {"retries": 3}}):
            pass


async def test_ticking_an_unknown_handler_names_the_loaded_ones():
    """h.tick('typo') says which handlers exist."""
    from drover import UnknownHandlerError

    async with CoordinatorHarness() as h:
        with pytest.raises(UnknownHandlerError, match="schedule-sessions"):
            await h.tick("schedule-session")
