"""One daemon for every lifecycle (issue 34): drover's sessions and deployments and the four
packs under ``examples/`` (experimaestro, dstack, Language Pipes, Iris) load together, on one
configuration and one database, and each pack's scenario runs to its end there.

The coordinator is the harness's (every plugin, the built-in handlers too), on SQLite and
PostgreSQL; ``drover plugins check --strict`` of the same set (the configuration
``examples/all-lifecycles.toml``) is clean. And that daemon itself (``drover run``'s,
``App.run_daemon``, on that configuration with the simulated backend) runs a session, a
deployment (its replica's "server" is this test's HTTP server: READY, then destroyed) and
each pack's scenario to their end on the real clock.
"""

from __future__ import annotations

import json
import time
import tomllib
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from daemon_helpers import running_daemon, wait_for
from drover_dstack import DstackPlugin, RunRequest, SimulatedCloud, submit_run
from drover_experimaestro import ExperimaestroPlugin
from drover_experimaestro import JobRequest as XpmRequest
from drover_experimaestro import submit as xpm_submit
from drover_iris import AttemptState, IrisPlugin, SimulatedCluster, heartbeat, submit_job
from drover_iris import JobRequest as IrisRequest
from drover_lpipes import JobRequest as LpRequest
from drover_lpipes import LanguagePipesPlugin, reference
from drover_lpipes import submit as lp_submit
from test_deployment_tables import replica, spec, with_port  # noqa: F401  (replica: fixture)

from drover.cli.group import main
from drover.kinds.sessions.values import SessionStatus
from drover.testing import CoordinatorHarness

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "all-lifecycles.toml"
PACKS = ("experimaestro", "dstack", "lpipes", "iris")

#: A daemon on the real clock beside other test runs on a 2-CPU machine: generous, as a
#: deadline only (a healthy run takes 13-20 s in all).
_PATIENCE = 90.0


def _every_lifecycle(database: Any) -> CoordinatorHarness:
    """One harness (one App, one database) with the built-ins and the four packs."""
    plugins = [
        ExperimaestroPlugin(),
        DstackPlugin(SimulatedCloud()),
        LanguagePipesPlugin(),
        IrisPlugin(SimulatedCluster({"w1": 2, "w2": 2})),
    ]
    return CoordinatorHarness(
        plugins=plugins, database_url=database.url, database_schema=database.schema
    )


async def _end(h: CoordinatorHarness, entity: str) -> tuple[str, str | None]:
    found = await h.get(entity)
    return str(found.status), found.result


async def test_every_lifecycle_runs_to_its_end_in_one_coordinator(database):
    async with _every_lifecycle(database) as h:
        kinds = set(h.app.kinds)
        assert {"session", "kernel", "deployment", "route"} <= kinds
        assert {"xpm-job", "dstack-run", "lp-job", "iris-job"} <= kinds
        session = await h.create_session(kernels=({"cpu": 1, "mem": 1024, "sim": {"run_for": 5}},))
        xpm = await xpm_submit(h.repository, h.app.queries, XpmRequest("train", {"lr": 0.1}))
        run = await submit_run(h.repository, RunRequest("run", sim={"*": [{"run_for": 30}]}))
        prompt = "what does the pipe carry"
        lp = await lp_submit(h.repository, LpRequest(prompt, max_tokens=2))
        iris = await submit_job(h.repository, IrisRequest("hello"), now=h.clock.time())
        await h.run_until_settled()
        # Iris's workers report through heartbeats: the attempt runs and succeeds.
        (task,) = (await h.get(iris)).children
        (attempt,) = (await h.get(task.id)).children
        for state in (AttemptState.BUILDING, AttemptState.RUNNING, AttemptState.SUCCEEDED):
            h.clock.advance(1)
            code = 0 if state == AttemptState.SUCCEEDED else None
            assert await heartbeat(h.repository, attempt.id, state, exit_code=code)
            await h.run_until_settled()
        # The session's kernel and dstack's job run for their time.
        h.clock.advance(30)
        await h.run_until_settled()
        assert await _end(h, session) == (SessionStatus.TERMINATED, "SUCCESS")
        assert await _end(h, xpm) == ("DONE", "SUCCESS")
        assert await _end(h, run) == ("DONE", "SUCCESS")
        assert await _end(h, lp) == ("COMPLETED", "SUCCESS")
        assert (await h.get(lp)).data["tokens"] == reference(prompt, 30, 2)
        assert await _end(h, iris) == ("SUCCEEDED", "SUCCESS")
        # Each lifecycle was moved by its own handlers only.
        handlers = {r.handler for e in (xpm, run, lp, iris) for r in await h.history(e)}
        assert not {n for n in handlers if n.endswith("-sessions")}


def test_the_configuration_of_every_lifecycle_checks_clean(database, monkeypatch, tmp_path):
    """``drover plugins check --strict`` of the one configuration: no error, no warning."""
    config = tomllib.loads(CONFIG.read_text())
    assert sorted(config["plugins"]["load"]) == sorted(PACKS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DROVER_LOAD_PLUGINS", raising=False)
    env = {"DROVER_DATABASE_URL": database.url, "DROVER_DATABASE_SCHEMA": database.schema or ""}
    args = ["--config", str(CONFIG), "plugins", "check", "--strict", "--json"]
    checked = CliRunner().invoke(main, args, env=env)
    assert checked.exit_code == 0, checked.output
    report = json.loads(checked.output)
    assert (report["errors"], report["warnings"]) == ([], [])
    listed = CliRunner().invoke(main, ["--config", str(CONFIG), "plugins", "--json"], env=env)
    assert {p["name"] for p in json.loads(listed.output)} >= set(PACKS)


async def _status_is(app: Any, entity: str, *wanted: str) -> Any:
    found = await app.repository.get_entity(entity)
    return found if str(found.status) in wanted else None


async def test_the_daemon_of_every_lifecycle_runs_each_packs_scenario(
    database,
    tmp_path,
    replica,  # noqa: F811
):
    """The real daemon (``drover run``'s, in this event loop) on ``examples/all-lifecycles.toml``
    (simulated backend): a session, a deployment whose replica answers on a real HTTP server,
    and one scenario of each pack run to their end on the real clock."""
    flags = {"backend.name": "simulated", "backend.run_for": None}
    async with running_daemon(database, tmp_path / "data", config=CONFIG, **flags) as (app, _d):
        assert {"xpm-job", "dstack-run", "lp-job", "iris-job", "deployment"} <= set(app.kinds)
        repo, queries = app.repository, app.queries
        kernel = {"command": ["true"], "cpu": 1, "mem": 64}
        (session,) = await repo.create_sessions([{"kernels": [{**kernel, "sim": {"run_for": 1}}]}])
        dep = await repo.create_entity(
            "deployment", spec=spec(1, kernel=with_port(replica.port)), name="web"
        )
        xpm = await xpm_submit(repo, queries, XpmRequest("train", {"lr": 0.1}))
        run = await submit_run(repo, RunRequest("run", sim={"*": [{"run_for": 1}]}))
        prompt = "what does the pipe carry"
        lp = await lp_submit(repo, LpRequest(prompt, max_tokens=2))
        iris = await submit_job(repo, IrisRequest("hello"), now=time.time())
        # Iris's workers report through heartbeats: its attempt runs and succeeds.
        task = (
            await wait_for(lambda: _children(app, iris), timeout=_PATIENCE, what="iris's task")
        )[0]
        attempt = (
            await wait_for(
                lambda: _children(app, task.id), timeout=_PATIENCE, what="iris's attempt"
            )
        )[0]
        for state in (AttemptState.BUILDING, AttemptState.RUNNING, AttemptState.SUCCEEDED):
            code = 0 if state == AttemptState.SUCCEEDED else None
            # Retried until its attempt is where the report expects it (the daemon's pace).
            await wait_for(
                lambda s=state, c=code: heartbeat(repo, attempt.id, s, exit_code=c),
                timeout=_PATIENCE,
                what=state,
            )
        ended = {
            session: (SessionStatus.TERMINATED, "SUCCESS"),
            xpm: ("DONE", "SUCCESS"),
            run: ("DONE", "SUCCESS"),
            lp: ("COMPLETED", "SUCCESS"),
            iris: ("SUCCEEDED", "SUCCESS"),
        }
        for entity, (status, result) in ended.items():
            found = await wait_for(
                lambda e=entity, s=status: _status_is(app, e, s), timeout=_PATIENCE, what=status
            )
            assert (str(found.status), found.result) == (status, result)
        assert (await repo.get_entity(lp)).data["tokens"] == reference(prompt, 30, 2)
        # The deployment becomes READY on its replica's health, then is destroyed.
        await wait_for(lambda: _status_is(app, dep, "READY"), timeout=_PATIENCE, what="READY")
        (outcome,) = await repo.request_termination([dep])
        assert outcome.changed
        await wait_for(
            lambda: _status_is(app, dep, "DESTROYED"), timeout=_PATIENCE, what="DESTROYED"
        )
        # Each lifecycle was moved by its own handlers only.
        handlers = {r.handler for e in (xpm, run, lp, iris) for r in await repo.history(e)}
        assert not {n for n in handlers if n.endswith("-sessions")}


async def _children(app: Any, entity: str) -> Any:
    return (await app.repository.get_entity(entity)).children
