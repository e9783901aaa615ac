"""``python -m drover.demo``: the daemon, real processes and the operator CLI, start to end.

1. starts ``drover run`` in the background (local backend, or with
   ``--backend slurm`` the Slurm cluster of ``make slurm-up``, or with
   ``--backend container`` containers on the Podman of ``make podman-up``;
   an SQLite file);
2. submits real sessions with ``drover submit``: one that succeeds, one that
   exits non-zero, and one that is terminated while running (its result is
   CANCELLED); one that asks for more cpu than any agent has is refused at
   submit, with the reason; on the local backend, one that asks for the whole
   agent waits PENDING, with its reason, until the terminated one frees it;
3. waits until they settle;
4. prints each session with ``drover show``;
5. deploys a service of two replicas of Python's ``http.server`` (busybox
   ``httpd`` in containers), shows them HEALTHY, kills one replica's processes
   (its container), shows it replaced, and destroys the service;
6. stops the daemon with SIGTERM and checks that it exited cleanly.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

from drover.kinds.deployments import deployments, routes

__all__ = ["main", "run_demo"]

_SETTLED = {"TERMINATED", "CANCELLED", "ERROR"}


def _executable() -> list[str]:
    """The ``drover`` command of this Python environment, as a user would type it.

    ``.venv/bin/drover`` (relative to the working directory when it is below
    it), or ``python -m drover`` when the environment has no such script.
    """
    script = Path(sys.executable).with_name("drover")
    if not script.exists():
        return [sys.executable, "-m", "drover"]
    absolute = Path(os.path.abspath(script))
    try:
        return [str(absolute.relative_to(Path.cwd()))]
    except ValueError:
        return [str(absolute)]


def _shown_path(path: Path) -> str:
    """``path`` relative to the working directory when it is below it: shorter to paste."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _argv(config: Path, *args: str) -> list[str]:
    """The full command line of a CLI call: the same for running and for printing."""
    return [*_executable(), "--config", _shown_path(config), *args]


def _show(config: Path, *args: str, note: str = "") -> None:
    """Print a command as a user can paste it into a shell (quoted, with its --config)."""
    _say(f"$ {shlex.join(_argv(config, *args))}" + (f"   # {note}" if note else ""))


def _drover(config: Path, *args: str, show: bool = False, note: str = "") -> str:
    """Run one ``drover`` CLI command and return its stdout (raising on failure).

    With ``show`` the command is printed first, exactly as it is run.
    """
    if show:
        _show(config, *args, note=note)
    done = subprocess.run(_argv(config, *args), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise click.ClickException(f"drover {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout


def _refused(config: Path, *args: str) -> str:
    """Run a ``drover`` command that must be refused; return its one-line error."""
    done = subprocess.run(_argv(config, *args), capture_output=True, text=True, check=False)
    if done.returncode == 0:
        raise click.ClickException(f"drover {' '.join(args)} was accepted; it should not be")
    return done.stderr.strip()


def _wait_for_reason(config: Path, name: str, timeout: float = 60.0) -> None:
    """Wait until the scheduler has said why session ``name`` waits."""
    deadline = time.monotonic() + timeout
    while "insufficient resources" not in _drover(config, "why", name):
        if time.monotonic() > deadline:
            raise click.ClickException(f"timed out waiting for the reason {name} waits")
        time.sleep(0.3)


def _say(text: str) -> None:
    click.secho(text, bold=True)


def run_demo(
    workdir: Path, *, database_url: str | None = None, schema: str = "", backend: str = "local"
) -> dict[str, Any]:
    """Run the demo in ``workdir``; return each session's final state by name.

    ``backend`` is ``local`` (one agent, ``demo-agent``), ``slurm`` (the
    cluster's nodes; every job is named ``drover-demo-<kernel id>``) or
    ``container`` (one agent; containers in the busybox image of
    ``scripts/podman-up.sh`` on ``$DROVER_PODMAN_URL``, by default its socket
    ``/tmp/drover-podman/podman.sock``, named ``drover-demo-<kernel id>``).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    database_url = database_url or f"sqlite+aiosqlite:///{workdir / 'demo.db'}"
    config = workdir / "drover.toml"
    agent = '[[backend.agents]]\nid = "demo-agent"\ncpu = 4\nmem = 4096\n'
    if backend == "local":
        where = agent
    elif backend == "container":
        where = agent + (
            f'[backend.settings]\nurl = "{_podman_url()}"\npoll_interval = 0.3\n'
            f'default_image = "{DEMO_IMAGE}"\nlabel_prefix = "drover-demo"\n'
        )
    else:
        where = '[backend.settings]\npoll_interval = 0.5\njob_name_prefix = "drover-demo-"\n'

    config.write_text(
        f'database_url = "{database_url}"\n'
        f'database_schema = "{schema}"\n'
        f'data_dir = "{workdir / "data"}"\n'
        "heartbeat_interval = 1.0\n"
        "[backend]\n"
        f'name = "{backend}"\n'
        "kill_grace = 3.0\n"
        + where
        # The service's handlers look often, so the tour does not wait.
        + "".join(f"[handlers.{name}]\ninterval = 0.5\n" for name in _SERVICE_HANDLERS)
    )
    log_path = workdir / "daemon.log"
    _say(f"$ {shlex.join(_argv(config, 'run'))} > {shlex.quote(_shown_path(log_path))} 2>&1 &")
    with open(log_path, "wb") as log:
        daemon = subprocess.Popen(_argv(config, "run"), stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for_daemon(config, daemon)
        submissions = {
            "succeeds": ["--", "sh", "-c", "echo hello from drover; sleep 1"],
            "exits-non-zero": ["--", "sh", "-c", "echo about to fail >&2; exit 3"],
            "stopped-by-user": ["--", "sleep", "300"],
        }
        ids: dict[str, str] = {}
        for name, args in submissions.items():
            ids[name] = _drover(config, "submit", "--name", name, *args, show=True).strip()
            click.echo(ids[name])
        victim = ids["stopped-by-user"]
        _wait(config, lambda s: s[victim]["status"] == "RUNNING", "stopped-by-user to run")
        too_large = ("submit", "--name", "too-large", "--cpu", "64", "--", "true")
        _show(config, *too_large, note="no agent has 64 cpus")
        click.echo(_refused(config, *too_large))
        if backend == "local":
            # The whole agent (4 cpus) while stopped-by-user holds one: it waits for room.
            ids["waits-for-room"] = _drover(
                config, "submit", "--name", "waits-for-room", "--cpu", "4", "--", "true", show=True
            ).strip()
            click.echo(ids["waits-for-room"])
            _wait_for_reason(config, "waits-for-room")
            click.echo(_drover(config, "why", "waits-for-room", show=True).rstrip())
        click.echo(_drover(config, "terminate", "stopped-by-user", show=True).strip())
        finals = _wait(
            config,
            lambda s: all(s[sid]["status"] in _SETTLED for sid in ids.values()),
            "the sessions to settle",
        )
        for name, sid in ids.items():
            click.echo()
            click.echo(_drover(config, "show", sid, show=True, note=name).rstrip())
        click.echo()
        click.echo(_drover(config, "status", show=True).rstrip())
        result: dict[str, Any] = {name: finals[sid] for name, sid in ids.items()}
        if backend in ("local", "container"):
            # Replicas get $PORT from these backends; the slurm backend gives none.
            result["service"] = _service_tour(config, containers=backend == "container")
        return result
    finally:
        _say("\nstopping the daemon with SIGTERM")
        daemon.send_signal(signal.SIGTERM)
        try:
            code = daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            code = daemon.wait()
        click.echo(f"daemon exited with code {code}")
        if code != 0:
            raise click.ClickException(f"the daemon did not stop cleanly; see {log_path}")


#: The deployment and route handlers (the service tour makes them tick often).
_SERVICE_HANDLERS = (*deployments.HANDLERS, *(h.name() for h in routes.ROUTE_HANDLERS))


def _routes(config: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(_drover(config, "routes", "web", "--all", "--json"))
    return rows


def _until(check: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.3)
    raise click.ClickException(f"timed out waiting for {what}")


def _service_tour(config: Path, *, containers: bool = False) -> dict[str, Any]:
    """Deploy two replicas of http.server, kill one, watch it replaced, destroy the service."""
    server = (
        "exec httpd -f -p $PORT -h /www"
        if containers
        else "exec python3 -m http.server --bind 127.0.0.1 $PORT"
    )
    click.echo()
    click.echo(
        _drover(
            config, "deploy", "web", "--replicas", "2", "--evict-after", "1",
            "--", "sh", "-c", server, show=True,
        ).strip()
    )  # fmt: skip

    def healthy() -> list[dict[str, Any]]:
        good = [r for r in _routes(config) if r["status"] == "HEALTHY"]
        return good if len(good) == 2 else []

    first = _until(healthy, "two HEALTHY replicas")
    click.echo(_drover(config, "routes", "web", show=True).rstrip())
    victim = first[0]
    kernel = json.loads(_drover(config, "show", victim["session_id"], "--json"))["kernels"][0]
    if containers:
        _say(f"\n$ podman kill {kernel['container']}   # one replica's container, as a crash would")
        asyncio.run(_kill_container(kernel["container"]))
    else:
        _say(f"\n$ kill -9 -{kernel['pid']}   # one replica's processes, as a crash would")
        os.killpg(int(kernel["pid"]), signal.SIGKILL)

    def replaced() -> list[dict[str, Any]]:
        good = healthy()
        return good if good and victim["id"] not in {r["id"] for r in good} else []

    _until(replaced, "the killed replica to be replaced")
    note = "the killed replica's route ended; a new one serves"
    click.echo(_drover(config, "routes", "web", "--all", show=True, note=note).rstrip())
    click.echo()
    click.echo(_drover(config, "destroy", "web", show=True).strip())

    def destroyed() -> list[dict[str, Any]]:
        listed = json.loads(_drover(config, "deployments", "--all", "--json"))
        return [d for d in listed if d["name"] == "web" and d["status"] == "DESTROYED"]

    (final,) = _until(destroyed, "the service to be destroyed")
    click.echo(_drover(config, "deployments", "--all", show=True).rstrip())
    return {
        "status": final["status"],
        "replaced": victim["id"],
        "routes": {r["id"]: r["status"] for r in _routes(config)},
    }


#: The busybox image scripts/podman-up.sh builds.
DEMO_IMAGE = "localhost/drover-test:latest"


def _podman_url() -> str:
    return os.environ.get("DROVER_PODMAN_URL") or "unix:///tmp/drover-podman/podman.sock"


async def _kill_container(name: str) -> None:
    """SIGKILL a container through the Engine API, as a crash inside it would end it."""
    import aiodocker

    docker = aiodocker.Docker(url=_podman_url())
    try:
        await docker.containers.container(name).kill(signal="SIGKILL")
    finally:
        await docker.close()


def _wait_for_daemon(config: Path, daemon: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """Until ``drover status`` shows a live coordinator (it has migrated the database)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise click.ClickException(f"the daemon exited with code {daemon.returncode}")
        try:
            if json.loads(_drover(config, "status", "--json"))["coordinators"]:
                return
        except click.ClickException:
            pass  # not migrated yet
        time.sleep(0.2)
    raise click.ClickException("the daemon did not start in time")


def _wait(config: Path, done: Any, what: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        sessions = {s["id"]: s for s in json.loads(_drover(config, "sessions", "--json"))}
        if done(sessions):
            return sessions
        if time.monotonic() > deadline:
            raise click.ClickException(f"timed out waiting for {what}")
        time.sleep(0.3)


@click.command()
@click.option(
    "--dir",
    "workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("demo-data"),
    show_default=True,
    help="Where the demo's database, configuration, logs and kernel output go (recreated).",
)
@click.option(
    "--backend",
    type=click.Choice(["local", "slurm", "container"]),
    default="local",
    show_default=True,
    help="Real processes on this machine, jobs on the Slurm cluster (`make slurm-up`), or "
    "containers on Podman (`make podman-up`).",
)
def main(workdir: Path, backend: str) -> None:
    """Run the daemon on real processes, submit sessions, and show what happened.

    Example: python -m drover.demo --dir /tmp/drover-demo

    Example: python -m drover.demo --dir demo-data-slurm --backend slurm

    Example: python -m drover.demo --dir demo-data-container --backend container
    """
    if workdir.exists():
        for path in sorted(workdir.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
    finals = run_demo(workdir.resolve(), backend=backend)
    service = finals.pop("service", None)
    _say("\nfinal statuses:")
    for name, session in finals.items():
        click.echo(
            f"  {name:16} {session['status']:11} result={session['result']} "
            f"status_info={session['status_info']}"
        )
    if service is not None:
        ended = ", ".join(sorted(set(service["routes"].values())))
        click.echo(
            f"  service web      {service['status']:11} routes={len(service['routes'])} ({ended})"
        )
    _say(f"\nyour turn: paste these (the database stays in {_shown_path(workdir)}/)")
    for args, note in paste_commands(finals):
        _show(workdir / "drover.toml", *args, note=note)


def paste_commands(finals: dict[str, Any]) -> list[tuple[tuple[str, ...], str]]:
    """Commands to try on the demo's database after it ran: ``(arguments, what it shows)``.

    ``finals`` is :func:`run_demo`'s answer (without ``service``). Each is
    printed with the demo's ``--config``, so it reads the demo's database.
    """
    ok, failed = finals["succeeds"]["id"], finals["exits-non-zero"]["id"]
    return [
        (("sessions",), "every session"),
        (("show", ok), "kernels, pids, exit codes, history"),
        (("logs", ok), "what the kernel printed"),
        (("logs", failed, "--stderr"), "what the failing kernel said"),
        (("why", failed), "how it ended, in words"),
        (("history", failed), "every outcome of one session"),
        (("serve",), "the dashboard on http://127.0.0.1:8080/ (Ctrl-C stops it)"),
        (("run",), "the daemon again (Ctrl-C stops it)"),
    ]


if __name__ == "__main__":
    os.environ.pop("DROVER_CONFIG", None)
    sys.exit(main())
