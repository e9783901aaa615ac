"""Running the real daemon in-process (local backend) for end-to-end tests."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from drover.app import App
from drover.config import load_config
from drover.coordinator.daemon import Daemon
from drover.kinds.sessions.values import SessionStatus as S

#: The built-in lifecycle a successful session takes: (handler, from, to) per step.
LIFECYCLE = [
    ("schedule-sessions", S.PENDING, S.SCHEDULED),
    ("prepare-sessions", S.SCHEDULED, S.PREPARING),
    ("promote-to-prepared", S.PREPARING, S.PREPARED),
    ("start-sessions", S.PREPARED, S.CREATING),
    ("promote-to-running", S.CREATING, S.RUNNING),
    ("detect-termination", S.RUNNING, S.TERMINATING),
    ("promote-to-terminated", S.TERMINATING, S.TERMINATED),
]

#: The lifecycle a real backend may take instead: kernels it prepares while
#: prepare-sessions' execute runs are PREPARED before that handler's apply, so
#: promote-to-prepared (from SCHEDULED or PREPARING, as the seed's table says) moves
#: the session first and prepare-sessions' compare-and-set finds it gone.
LIFECYCLES = (
    LIFECYCLE,
    [LIFECYCLE[0], ("promote-to-prepared", S.SCHEDULED, S.PREPARED), *LIFECYCLE[3:]],
)

AGENT = [{"id": "test-agent", "cpu": 4, "mem": 4096}]


def ends_on_word(go: Path, *, before: str = "true", then: str = "exit 0") -> list[str]:
    """A command that runs ``before``, then ``then`` within 10 ms of ``go`` appearing.

    A command that must end after its session is RUNNING waits for the test's
    word: one that ends before is a start failure, and a fixed sleep loses that
    race on a loaded machine. A session ends when its first kernel exits (the
    others are destroyed), so kernels that must all end on their own exit
    together on the same word. Gives up with exit 99 after 60 s.
    """
    wait = f"for i in $(seq 6000); do [ -e {go} ] && {{ {then}; }}; sleep 0.01; done; exit 99"
    return ["sh", "-c", f"{before}; {wait}"]


def daemon_flags(database: Any, data_dir: Path, **extra: Any) -> dict[str, Any]:
    """Flags for a fast daemon on the test's database and a temporary data directory."""
    flags: dict[str, Any] = {
        "database_url": database.url,
        "database_schema": database.schema or "",
        "data_dir": str(data_dir),
        "backend.name": "local",
        "backend.agents": AGENT,
        "backend.kill_grace": 3.0,
        "safety_interval": 2.0,
        "heartbeat_interval": 0.5,
        # A daemon killed with -9 leaves its claims (PostgreSQL) until they expire.
        "claim_ttl": 3.0,
        "shutdown_grace": 5.0,
    }
    flags.update(extra)
    return flags


@asynccontextmanager
async def running_daemon(
    database: Any, data_dir: Path, *, config: Path | None = None, **extra: Any
) -> AsyncIterator[tuple[App, Daemon]]:
    """Start ``drover run``'s daemon in this event loop; stop it cleanly on exit.

    ``config`` is a configuration file (as ``drover --config``); the flags win over it.
    """
    loaded = load_config(config, environ={}, flags=daemon_flags(database, data_dir, **extra))
    app = App(loaded, claims=True)
    ready: asyncio.Future[Daemon] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(app.run_daemon(install_signals=False, on_ready=ready.set_result))
    try:
        daemon = await asyncio.wait_for(asyncio.shield(ready), timeout=20)
    except BaseException:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await app.close()
        raise
    try:
        yield app, daemon
    finally:
        daemon.stop()
        await asyncio.wait_for(task, timeout=30)
        await app.close()


async def wait_for(
    probe: Callable[[], Awaitable[Any]], *, timeout: float = 20.0, what: str = "condition"
) -> Any:
    """Poll ``probe`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a live, non-zombie process."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in {"Z", "X"}


def live_processes(*, pgid: int | None = None, sid: int | None = None) -> list[int]:
    """Pids of the live (non-zombie) processes in process group ``pgid`` or session ``sid``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            text = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if fields[0] in ("Z", "X"):
            continue
        if (pgid is not None and int(fields[2]) == pgid) or (
            sid is not None and int(fields[3]) == sid
        ):
            found.append(int(name))
    return found


#: Daemon flags that prune ended kernels' files unchanged for an hour, five times a second.
PRUNING = {"history.kernel_files_retention": "1h", "history.prune_interval": 0.2}


def make_old(directory: Path, seconds: float = 7200.0) -> None:
    """Date ``directory`` and everything in it ``seconds`` back (links themselves, not
    what they name)."""
    old = time.time() - seconds
    for path in (directory, *directory.rglob("*")):
        os.utime(path, (old, old), follow_symlinks=False)


async def files_of_ended_kernels_go(app: App, data_dir: Path, ended: str, live: str) -> None:
    """File retention, as every backend keeps it under :data:`PRUNING`: with both kernel
    directories two hours old, the ended session's kernel directory goes, the running
    one's stays (with its files) through many prunes and its session keeps RUNNING."""
    done, running = await app.repository.get_session(ended), await app.repository.get_session(live)
    assert (done.status, running.status) == (S.TERMINATED, S.RUNNING)
    (ended_dir,) = (data_dir / "kernels" / k.id for k in done.kernels)
    (live_dir,) = (data_dir / "kernels" / k.id for k in running.kernels)
    assert ended_dir.is_dir()
    assert live_dir.is_dir()
    files = sorted(p.name for p in live_dir.iterdir())
    # The live one first: the prune that removes the ended one has seen both old.
    make_old(live_dir)
    make_old(ended_dir)

    async def gone() -> bool:
        return not ended_dir.exists()

    await wait_for(gone, what=f"the ended kernel's directory {ended_dir} to be pruned")
    await asyncio.sleep(1.0)  # five more prunes
    assert sorted(p.name for p in live_dir.iterdir()) == files
    assert (await app.repository.get_session(live)).status == S.RUNNING
