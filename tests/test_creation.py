"""One creation path: the API, the harness and a handler's result create entities alike.

Before it, ``create_entity("session", …)`` accepted specs ``create_session``
refused, gave no name and a CREATED row where the other gave a name and no
row, and a handler's ``NewEntity`` with a NaN in its spec was stored on
SQLite while the API refused the same spec. Every test runs on SQLite and
PostgreSQL.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest

from drover import (
    Entity,
    HandlerResult,
    InvalidSpecError,
    LifecycleHandler,
    NewEntity,
    SessionStatus,
    StatusTransitions,
    Transition,
    hookimpl,
)
from drover.kinds.deployments.status import RouteStatus

S = SessionStatus

# (session spec, kernel spec, the refusal both paths give)
BAD_SESSIONS = [
    ({"options": {"prepare-sessions": {"retries": 3}}}, {}, "has unknown option 'retries'"),
    ({"options": {"prepare-sessions": {"timeout": -1}}}, {}, "'timeout'] must be a finite number"),
    ({"max_requeues": "x"}, {}, "spec['max_requeues'] must be a whole number from 0 to"),
    ({}, {"status": "RUNNING"}, "kernel 1: 'status' is set by drover, not by a kernel spec"),
    ({}, {"agent_id": "sim-1"}, "kernel 1: 'agent_id' is set by drover"),
    ({"ratio": float("nan")}, {}, "session spec: nan is not a finite number"),
    ({}, {"gpu": float("inf")}, "kernel 1: resource 'gpu' must be a finite number >= 0"),
    ({"note": "a\x00b"}, {}, "contains a NUL character"),
]


async def _by_api(h: Any, spec: dict[str, Any], kernel: dict[str, Any]) -> str:
    return str(await h.repository.create_session(kernels=[{"cpu": 1, **kernel}], spec=spec))


async def _by_entity(h: Any, spec: dict[str, Any], kernel: dict[str, Any]) -> str:
    children = [{"spec": {"cpu": 1, **kernel}}]
    return str(await h.repository.create_entity("session", spec=spec, children=children))


PATHS = [pytest.param(_by_api, id="create_session"), pytest.param(_by_entity, id="create_entity")]


@pytest.mark.parametrize("create", PATHS)
@pytest.mark.parametrize(("spec", "kernel", "message"), BAD_SESSIONS)
async def test_both_paths_refuse_the_same_sessions_and_write_nothing(
    make_harness, create, spec, kernel, message
):
    async with make_harness() as h:
        with pytest.raises(InvalidSpecError, match=re.escape(message)):
            await create(h, spec, kernel)
        assert await h.repository.list_sessions() == []
        assert await h.repository.history() == []


@pytest.mark.parametrize("create", PATHS)
async def test_both_paths_give_a_name_and_a_created_row(make_harness, create):
    async with make_harness() as h:
        sid = await create(h, {"max_requeues": 1}, {"command": ["true"]})
        session = await h.session(sid)
        assert session.name == f"session-{sid[-12:]}"
        assert (session.status, [k.status for k in session.kernels]) == (S.PENDING, [S.PENDING])
        assert [k.spec for k in session.kernels] == [{"cpu": 1, "command": ["true"]}]
        (row,) = await h.history(sid)
        assert (row.handler, row.result, row.from_status, row.to_status, row.message) == (
            "api",
            "CREATED",
            S.PENDING,
            S.PENDING,
            "created by api",
        )


@pytest.mark.parametrize(
    "create",
    [
        pytest.param(lambda r: r.create_session(kernels=[], status=S.RUNNING), id="create_session"),
        pytest.param(lambda r: r.create_entity("session", status="RUNNING"), id="create_entity"),
    ],
)
async def test_a_new_session_starts_pending_on_both_paths(make_harness, create):
    async with make_harness() as h:
        message = r"a new session is PENDING; its status \(RUNNING\) is set by drover"
        with pytest.raises(InvalidSpecError, match=message):
            await create(h.repository)
        assert await h.repository.list_sessions() == []


class _CreateSessions(LifecycleHandler):
    """A route handler that creates one session per route, with the spec the test gives."""

    kind = "route"

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec

    @classmethod
    def name(cls) -> str:
        return "create-replicas"

    @property
    def target_statuses(self) -> frozenset[str]:
        return frozenset({RouteStatus.PROVISIONING})

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        return StatusTransitions(success=Transition(RouteStatus.DEGRADED))

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        create = [
            NewEntity("session", dict(self.spec), by=t.id, children=[{"spec": {"cpu": 1}}])
            for t in targets
        ]
        return HandlerResult(successes=[t.id for t in targets], create=create)


def _plugin(handler: object) -> object:
    class _Plugin:
        @hookimpl
        def drover_register_handlers(self, register: Any) -> None:
            register(handler)

    return _Plugin()


async def test_a_handler_creating_a_nan_spec_is_refused_like_the_api(make_harness):
    """The handler's result is invalid (its targets skipped); nothing is created, on both DBs."""
    handler = _CreateSessions({"ratio": float("nan")})
    async with make_harness(plugins=[_plugin(handler)], include_builtin_handlers=False) as h:
        deployment = await h.create("deployment", "READY", spec={"replicas": 1})
        route = await h.create("route", RouteStatus.PROVISIONING, parent=deployment)
        report = await h.tick("create-replicas")
        assert report.error is not None
        assert "cannot create: session spec: nan is not a finite number" in report.error
        assert (await h.get(route)).status == RouteStatus.PROVISIONING
        assert await h.repository.list_sessions() == []
        rows = [(r.handler, r.result, r.error_code) for r in await h.history(route)]
        assert rows == [("api", "CREATED", None), ("create-replicas", "SKIPPED", "invalid-result")]


async def test_a_handler_created_session_is_named_and_recorded(make_harness):
    """What a handler creates gets the API's name and a CREATED row naming the handler."""
    handler = _CreateSessions({"max_requeues": 2})
    async with make_harness(plugins=[_plugin(handler)], include_builtin_handlers=False) as h:
        deployment = await h.create("deployment", "READY", spec={"replicas": 1})
        route = await h.create("route", RouteStatus.PROVISIONING, parent=deployment)
        await h.tick("create-replicas")
        (session,) = await h.repository.list_sessions()
        assert session.name == f"session-{session.id[-12:]}"
        assert session.spec == {"max_requeues": 2}
        (row,) = await h.history(session.id)
        assert (row.handler, row.result, row.message) == (
            "create-replicas",
            "CREATED",
            f"created by create-replicas for {route}",
        )


def _shared(ids: list[str]) -> str:
    """The longest prefix every id starts with."""
    first = ids[0]
    n = 0
    while n < len(first) and all(len(i) > n and i[n] == first[n] for i in ids):
        n += 1
    return first[:n]


async def test_an_id_prefix_shared_with_its_own_kernels_means_the_session(make_harness):
    """Ids are time-ordered: a session and its kernels share their first characters. A
    prefix that matches a session and only its kernels is the session; one that matches
    two sessions is still ambiguous."""
    async with make_harness() as h:
        sid = await h.repository.create_session(kernels=[{"cpu": 1}, {"cpu": 1}])
        kernels = [k.id for k in (await h.session(sid)).kernels]
        shared = _shared([sid, *kernels])
        assert len(shared) < len(sid)
        assert await h.repository.resolve_entity_id(shared) == sid
        assert await h.repository.resolve_entity_id(kernels[1]) == kernels[1]
        other = await h.repository.create_session(kernels=[])
        both = _shared([sid, other])
        with pytest.raises(InvalidSpecError, match="is ambiguous"):
            await h.repository.resolve_entity_id(both)
