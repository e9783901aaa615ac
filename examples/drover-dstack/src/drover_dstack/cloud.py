"""A simulated cloud: offers with capacity, instances that can be interrupted, containers that exit.

Where dstack's server talks to backends, ``dstack-shim`` and ``dstack-runner``,
the pack's handlers talk to a :class:`SimulatedCloud`. It decides nothing a
real cloud would not: whether an offer has a free instance, when a container
exits and with which code (the job's ``spec["sim"]``), whether a container
stopped after SIGTERM. It reads the coordinator's clock, so tests move time
with the harness's manual clock and nothing sleeps.

A job's ``spec["sim"]`` is its container's behaviour (this submission's):

* ``run_for``: seconds after the start it exits (missing or null: it runs until stopped);
* ``exit_code``: its exit code then (default 0);
* ``stop_takes``: seconds it needs to exit after SIGTERM (default 0; null: it
  ignores SIGTERM, so only the kill after ``stop_duration`` stops it).

An interruption (:meth:`SimulatedCloud.interrupt`) is what a cloud tells
dstack outside any handler: it is pushed to drover as a report.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import attrs

from drover import Clock, Entity

from .kinds import JobStatus, JobTerminationReason

#: The ``source`` of the history rows the cloud's pushed reports write.
CLOUD_SOURCE = "dstack-cloud"


class Reporter(Protocol):
    """What the cloud pushes reports through (drover's ``Repository.report``)."""

    async def report(
        self,
        entity_id: str,
        status: str,
        *,
        expected: Iterable[str] | None = None,
        status_info: str | None = None,
        data: Any = None,
        message: str | None = None,
        source: str = ...,
    ) -> bool:
        """Move one entity (compare-and-set); return whether it applied."""
        ...


@attrs.define
class Offer:
    """Instances of one type in one region: at most ``capacity`` exist at once."""

    name: str
    capacity: int
    spot: bool = False


@attrs.define
class Instance:
    """One provisioned machine, running one job submission."""

    id: str
    offer: str
    job_id: str
    alive: bool = True


@attrs.define
class Container:
    """One job submission's container on its instance."""

    job_id: str
    started_at: float
    run_for: float | None
    exit_code: int
    stop_takes: float | None
    sigterm_at: float | None = None
    exited_at: float | None = None
    killed: bool = False


class SimulatedCloud:
    """Offers, instances and containers, in memory; ``events`` records every call.

    ``offers`` are tried in order (the first with a free instance wins); the
    default is one on-demand offer with room for 8 instances.
    """

    def __init__(self, offers: Sequence[Offer] | None = None) -> None:
        self.offers: list[Offer] = list(offers or [Offer("gpu-on-demand", 8)])
        self.instances: dict[str, Instance] = {}
        self.containers: dict[str, Container] = {}
        self.events: list[tuple[str, str]] = []
        self.clock: Clock | None = None
        self.reporter: Reporter | None = None

    def bind(self, clock: Clock, reporter: Reporter | None) -> None:
        """Use the coordinator's clock, and push reports through ``reporter``."""
        self.clock, self.reporter = clock, reporter

    def now(self) -> float:
        """The coordinator's time (epoch seconds)."""
        if self.clock is None:
            raise RuntimeError("the simulated cloud is not bound to a coordinator's clock")
        return self.clock.time()

    # -- what tests and the demo change ------------------------------------------------

    def offer(self, name: str) -> Offer:
        """The offer called ``name``."""
        for offer in self.offers:
            if offer.name == name:
                return offer
        raise KeyError(f"no offer called {name!r}")

    def set_capacity(self, name: str, capacity: int) -> None:
        """Change how many instances of offer ``name`` may exist."""
        self.offer(name).capacity = capacity

    def instance_of(self, job_id: str) -> Instance | None:
        """The instance a job submission runs on, if any."""
        return next((i for i in self.instances.values() if i.job_id == job_id), None)

    async def interrupt(self, instance_id: str) -> bool:
        """The cloud takes a (spot) instance back: its job is told, as a pushed report.

        Returns whether the job was still live before TERMINATING (the report applied).
        """
        instance = self.instances[instance_id]
        instance.alive = False
        container = self.containers.get(instance.job_id)
        if container is not None and container.exited_at is None:
            container.exited_at, container.killed = self.now(), True
        self.events.append(("interrupt", instance.job_id))
        if self.reporter is None:
            raise RuntimeError("the simulated cloud has no reporter to push the interruption to")
        return await self.reporter.report(
            instance.job_id,
            JobStatus.TERMINATING,
            expected=[JobStatus.PROVISIONING, JobStatus.PULLING, JobStatus.RUNNING],
            status_info=JobTerminationReason.INTERRUPTED_BY_NO_CAPACITY,
            message=f"instance {instance_id} ({instance.offer}) was interrupted",
            source=CLOUD_SOURCE,
        )

    def exit(self, job_id: str, exit_code: int) -> None:
        """Make a running container exit now with ``exit_code`` (a test's hand)."""
        container = self.containers[job_id]
        container.exit_code, container.exited_at = exit_code, self.now()

    # -- what the handlers call -----------------------------------------------------------

    def provision(self, job: Entity) -> Instance | None:
        """An instance from the first offer with room for one more, or None (no capacity)."""
        for offer in self.offers:
            used = sum(1 for i in self.instances.values() if i.alive and i.offer == offer.name)
            if used < offer.capacity:
                instance = Instance(f"i-{len(self.instances) + 1}", offer.name, job.id)
                self.instances[instance.id] = instance
                self.events.append(("provision", job.id))
                return instance
        self.events.append(("no-capacity", job.id))
        return None

    def start(self, job: Entity) -> None:
        """Start the job's container (its behaviour is the job's ``spec["sim"]``)."""
        sim: dict[str, Any] = dict(job.spec.get("sim") or {})
        stop_takes = sim.get("stop_takes", 0)
        self.containers[job.id] = Container(
            job.id,
            self.now(),
            run_for=sim.get("run_for"),
            exit_code=int(sim.get("exit_code", 0)),
            stop_takes=None if stop_takes is None else float(stop_takes),
        )
        self.events.append(("start", job.id))

    def exit_code(self, job: Entity) -> int | None:
        """The container's exit code once it has exited by itself, else None (still running)."""
        container = self.containers.get(job.id)
        if container is None:
            return None
        now = self.now()
        ends_at = None if container.run_for is None else container.started_at + container.run_for
        if container.exited_at is None and ends_at is not None and now >= ends_at:
            container.exited_at = ends_at
        return None if container.exited_at is None else container.exit_code

    def stop(self, job: Entity) -> bool:
        """Graceful stop: SIGTERM once; True once the container is gone (or never ran)."""
        container = self.containers.get(job.id)
        if container is None or container.exited_at is not None:
            return True
        now = self.now()
        if container.sigterm_at is None:
            container.sigterm_at = now
            self.events.append(("sigterm", job.id))
        if container.stop_takes is not None and now >= container.sigterm_at + container.stop_takes:
            container.exited_at = container.sigterm_at + container.stop_takes
            return True
        return self.exit_code(job) is not None

    def kill(self, job: Entity) -> None:
        """SIGKILL the container if it still runs."""
        container = self.containers.get(job.id)
        if container is not None and container.exited_at is None:
            container.exited_at, container.killed = self.now(), True
            self.events.append(("kill", job.id))

    def release(self, job: Entity) -> None:
        """Give the job's instance back to its offer."""
        instance = self.instance_of(job.id)
        if instance is not None and instance.alive:
            instance.alive = False
            self.events.append(("release", job.id))

    def calls(self, job_id: str) -> list[str]:
        """What the cloud was asked to do for one job submission, in order."""
        return [what for what, job in self.events if job == job_id]
