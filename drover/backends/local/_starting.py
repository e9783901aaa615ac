"""Starting a local command under its supervisor, never twice.

Private to the local backend. An earlier spawn of the same command (a
restart, a repeated call) is adopted or judged from its records; otherwise a
supervisor is spawned, fenced by the call's claim, and its handshake awaited.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Sequence
from typing import Any

import attrs

import drover.backends.local._disk as disk
from drover.backends.fence import Fence
from drover.backends.local._proc import boot_id
from drover.backends.local._watch import Attempt, Check, Command, handshake

__all__ = ["CommandStarter"]

log = logging.getLogger("drover.backends.local")


def _unchecked() -> None:
    """A fence check that always passes (the batch was checked as a whole)."""


class CommandStarter:
    """Adopts, judges or spawns the supervised commands of kernels and their setups."""

    def __init__(self) -> None:
        #: Supervisors that failed to start their command: reaped when they exit.
        self.reap: set[int] = set()

    def reap_exited(self) -> None:
        """Reap the supervisors of :attr:`reap` that exited."""
        for pid in list(self.reap):
            try:
                done, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self.reap.discard(pid)

    def _attempt(self, command: Command, check: Check, grace: float) -> Attempt:
        """(worker thread) Adopt or judge an earlier spawn of the command, or spawn it.

        ``check`` (the call's fence) runs right before anything is killed or spawned.
        """
        command.workdir.mkdir(parents=True, exist_ok=True)
        earlier = disk.inspect(command.workdir, command.role)
        if earlier is not None:
            if earlier.alive:
                return Attempt("adopt", earlier)
            if earlier.exit is not None:
                return Attempt("ended", earlier)
            if earlier.started or not earlier.this_boot:
                check()
                disk.kill_supervised(command.workdir, command.role, earlier)
                return Attempt("lost", earlier)
            # An intent whose supervisor never ran: the command never started.
        token = disk.new_token()
        check()
        try:
            pid, fd = disk.spawn_supervisor(
                command.workdir, command.role, token, command=command.argv, cwd=command.cwd,
                env=command.env, grace=grace, stdout=command.stdout, stderr=command.stderr,
            )  # fmt: skip
        except disk.SupervisorAliveError:
            again = disk.inspect(command.workdir, command.role)
            return Attempt("adopt", again) if again is not None else Attempt("failed")
        except (OSError, ValueError) as error:
            return Attempt("failed", message=f"cannot start its supervisor: {error}")
        return Attempt("spawned", token=token, pid=pid, handshake_fd=fd)

    async def start(
        self, commands: Sequence[Command], fence: Fence, *, grace: float, answer_within: float
    ) -> list[Attempt]:
        """Adopt or spawn each command; wait for the new supervisors' handshakes.

        A spawned attempt comes back as ``adopt`` with the supervisor's state
        (the command started), as ``ended`` (it could not start), or as
        ``failed`` (the supervisor never answered; it was killed). Raises
        :class:`FencedError`, having spawned nothing, if ``fence`` fails.
        ``grace``: the supervisor's seconds from SIGTERM to SIGKILL; ``answer_within``: the
        seconds a new supervisor has to answer.
        """
        if not commands:
            return []
        await fence.check()
        attempts: list[Attempt] = []

        def attempt_each() -> None:
            # One session's spawns go together: fenced before the first, never half
            # done (a session left with some kernels spawned and none reported RUNNING
            # would be sent back to PENDING, and its spawned kernels run again).
            fence.check_clock()
            for command in commands:
                attempts.append(self._attempt(command, _unchecked, grace))

        await asyncio.to_thread(attempt_each)
        answers = await asyncio.gather(
            *(handshake(a.handshake_fd, answer_within) for a in attempts if a.kind == "spawned")
        )
        answered = iter(answers)
        results: list[Attempt] = []
        for command, attempt in zip(commands, attempts, strict=True):
            if attempt.kind != "spawned":
                results.append(attempt)
                continue
            record = next(answered)
            results.append(await self._answered(command, attempt, record, answer_within))
        return results

    async def _answered(
        self,
        command: Command,
        attempt: Attempt,
        record: dict[str, Any] | None,
        answer_within: float,
    ) -> Attempt:
        if record is not None and record.get("token") == attempt.token:
            own = disk.DiskSpawn(attempt.token, boot_id(), True, record, None)
            if "pid" in record:
                return attrs.evolve(attempt, kind="adopt", spawn=own)
            self.reap.add(attempt.pid)  # it exits right after answering
            ended = disk.DiskSpawn(attempt.token, boot_id(), False, None, record)
            return attrs.evolve(attempt, kind="ended", spawn=ended)
        log.error("kernel %s: its supervisor did not start; killing it", command.kernel_id)
        found = await asyncio.to_thread(disk.inspect, command.workdir, command.role, wait=False)
        if found is not None:
            await asyncio.to_thread(disk.kill_supervised, command.workdir, command.role, found)
        with contextlib.suppress(ProcessLookupError):
            os.kill(attempt.pid, signal.SIGKILL)
        self.reap.add(attempt.pid)
        return attrs.evolve(
            attempt,
            kind="failed",
            message=f"its supervisor did not start within {answer_within:g}s",
        )
