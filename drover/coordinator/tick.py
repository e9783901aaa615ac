"""The coordinator: one tick of a handler is fetch, execute, classify, apply."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from typing import Any

import attrs

from drover.coordinator.classify import Rules, classify
from drover.coordinator.handlers import (
    Handler,
    LifecycleHandler,
    LoadedHandlers,
    fetch_filters,
    with_kind,
)
from drover.coordinator.store import CoordinatorStore
from drover.model.clock import Clock, SystemClock
from drover.model.creation import check_new_entities
from drover.model.errors import InvalidSpecError, UnknownHandlerError
from drover.model.filters import CandidateFilter, TimedOut
from drover.model.ids import new_id
from drover.model.kinds import EntityKind, Kinds
from drover.model.options import merge_options, overrides_from, session_options, validate_options
from drover.model.outcomes import Reported, TargetOutcomes
from drover.model.plan import AppliedChange, ApplyOutcome, Claim, Move
from drover.model.pools import takes_claim
from drover.model.promotion import PromotionRule
from drover.model.rules import DEFAULT_MAX_REQUEUES
from drover.model.status import SchedulingResult
from drover.model.values import HandlerOptions, HandlerResult, StatusTransitions, Target

__all__ = [
    "BLOCKING_THRESHOLD",
    "HANDLER_ERROR",
    "INVALID_RESULT",
    "Coordinator",
    "TickReport",
]

log = logging.getLogger("drover.coordinator")

#: Error code of the SKIPPED rows written when ``execute`` raised.
HANDLER_ERROR = "handler-error"
#: Error code of the SKIPPED rows written when the handler's result was invalid.
INVALID_RESULT = "invalid-result"
#: Seconds a handler may hold the event loop in one step of ``execute`` before it is logged.
BLOCKING_THRESHOLD = 1.0

_NOTHING = ApplyOutcome(changes=())


@attrs.frozen
class TickReport:
    """What one tick of one handler did.

    ``error`` is set when the handler's ``execute`` raised or returned an
    invalid result: its targets were then SKIPPED (a handler's fault is not
    evidence against the sessions).
    """

    handler: str
    fetched: int
    changes: tuple[AppliedChange, ...]
    duration: float
    ignored_ids: tuple[str, ...] = ()
    kernel_changes: int = 0
    error: str | None = None
    #: The ``(kind, status)`` pairs the tick's moved children entered.
    children_entered: frozenset[tuple[str, str]] = frozenset()
    #: The ids a lifecycle tick fetched (a promotion's: none), in fetch order.
    fetched_ids: tuple[str, ...] = ()

    @property
    def counts(self) -> dict[SchedulingResult | str, int]:
        """Entities per result class or named outcome (stale ones count as SKIPPED)."""
        return dict(Counter(c.result for c in self.changes))

    @property
    def moved_to(self) -> dict[str, int]:
        """Entities per status they were moved into by this tick."""
        return dict(Counter(c.to_status for c in self.changes if c.to_status != c.from_status))

    def count(self, result: SchedulingResult | str) -> int:
        """How many sessions got ``result`` in this tick."""
        return sum(1 for c in self.changes if c.result == result)


class Coordinator:
    """Runs ticks of loaded handlers against a store (the repository).

    ``options`` maps a handler name to configuration overrides (a mapping of
    fields, or a :class:`HandlerOptions`); they sit between the handler's own
    ``default_options()`` and each session's ``spec["options"][name]``.
    ``max_requeues`` is the requeue budget of entities whose spec sets none
    (``None``: no limit). ``kinds`` are the registered entity kinds (the
    app collects them from the plugins); ``budgets`` maps a kind to configured
    limits of its named budgets, between the kind's defaults and an
    entity's ``spec["budgets"]``. ``claim_owner`` (the daemon's id) makes every
    lifecycle tick claim its targets for ``claim_ttl`` seconds, so that several
    coordinators can share a PostgreSQL database (``None``: no claims).
    """

    def __init__(
        self,
        store: CoordinatorStore,
        handlers: Mapping[str, Handler],
        *,
        options: Mapping[str, HandlerOptions | Mapping[str, Any]] | None = None,
        clock: Clock | None = None,
        max_requeues: int | None = DEFAULT_MAX_REQUEUES,
        kinds: Kinds,
        budgets: Mapping[str, Mapping[str, int]] | None = None,
        claim_owner: str | None = None,
        claim_ttl: float = 60.0,
        max_creations: int | None = None,
        renew_claims: bool = False,
    ) -> None:
        self.store = store
        #: Entities one tick may create (limits.creations_per_tick; ``None``: any number).
        self.max_creations = max_creations
        # Configured budget limits travel with the kinds (storage reads them the same way).
        self.kinds = kinds.configured(budgets)
        loaded = {name: with_kind(h, self.kinds) for name, h in handlers.items()}
        self.clock: Clock = clock or SystemClock()
        self.max_requeues = max_requeues
        self._options: dict[str, HandlerOptions] = {}
        unknown = sorted(set(options or {}) - set(loaded))
        if unknown:
            log.warning(
                "options given for handler(s) %s, which are not loaded; loaded: %s",
                unknown,
                sorted(loaded),
            )
        for name, handler in loaded.items():
            if isinstance(handler, PromotionRule):
                base = handler.options
            else:
                base = type(handler).default_options()
            layer = overrides_from((options or {}).get(name))
            self._options[name] = validate_options(
                merge_options(base, layer), where=f"options of handler {name!r}"
            )
        self.handlers = LoadedHandlers(loaded, kinds=self.kinds, options=self._options)
        #: Test hook: called between apply steps with the step's name.
        self.inject_apply_failure: Callable[[str], None] | None = None
        #: Who claims this coordinator's targets (the daemon's id); ``None``: no claims.
        #: Claims matter only when several coordinators share a (PostgreSQL) database.
        self.claim_owner = claim_owner
        #: Seconds a tick's claim lasts: longer than any handler's execute() should take.
        #: Past it, other coordinators may take the entities over and this tick is fenced.
        self.claim_ttl = claim_ttl
        #: Renew a tick's claim every third of ``claim_ttl`` while its handler runs (a
        #: lease: the daemon does): its entities are taken over only once it stops
        #: renewing (it died, or is paused), never from a live tick that is merely slow.
        self.renew_claims = renew_claims
        #: The solo lease this coordinator holds (the daemon takes it when it runs alone on
        #: PostgreSQL): its ticks claim under it and mark no row. ``None``: claim per tick.
        self.solo_claim: Claim | None = None
        # Ticks running under the solo lease, and a gate new ticks wait at while the
        # lease is being left (a tick claiming rows never overlaps one that did not).
        self._solo_ticks = 0
        self._solo_quiet = asyncio.Event()
        self._solo_quiet.set()
        self._solo_gate = asyncio.Event()
        self._solo_gate.set()

    def options(self, name: str) -> HandlerOptions:
        """The resolved (handler default + configuration) options of handler ``name``."""
        self._handler(name)
        return self._options[name]

    def max_requeues_for(self, session: Target) -> int | None:
        """An entity's requeue budget: its spec's ``max_requeues``, else the configured one."""
        if "max_requeues" in session.spec:
            value = session.spec["max_requeues"]
            return value if isinstance(value, int) else None
        return self.max_requeues

    def budget_limit_for(self, entity: Target, budget: str) -> int | None:
        """A named budget's limit: the entity's ``spec["budgets"]``, else configuration, else
        the kind's default."""
        return self.kinds.budget_limit(entity.kind, entity.spec, budget)

    def _handler(self, name: str) -> Handler:
        try:
            return self.handlers[name]
        except KeyError:
            raise UnknownHandlerError(
                f"no handler named {name!r} is loaded; loaded: {sorted(self.handlers)}"
            ) from None

    async def tick(self, name: str) -> TickReport:
        """Run exactly one tick of handler ``name``."""
        handler = self._handler(name)
        started = time.perf_counter()
        error: str | None = None
        ignored: tuple[str, ...] = ()
        if isinstance(handler, PromotionRule):
            fetched, outcome = await self._promotion_tick(name, handler)
            fetched_ids: tuple[str, ...] = ()
        else:
            fetched_ids, outcome, ignored, error = await self._lifecycle_tick(name, handler)
            fetched = len(fetched_ids)
        report = TickReport(
            handler=name,
            fetched=fetched,
            changes=outcome.changes,
            duration=time.perf_counter() - started,
            ignored_ids=ignored,
            kernel_changes=outcome.kernel_changes,
            children_entered=outcome.children_entered,
            error=error,
            fetched_ids=fetched_ids,
        )
        if log.isEnabledFor(logging.DEBUG):
            # Counting a thousand changes per tick for a line nobody logs is not free.
            log.debug(
                "tick %s: fetched=%d counts=%s duration=%.3fs",
                name,
                fetched,
                {str(k): v for k, v in report.counts.items()},
                report.duration,
            )
        return report

    async def leave_solo(self) -> None:
        """Stop ticking under the solo lease; return once no tick runs under it any more.

        New ticks claim their rows again; they wait until then.
        """
        self.solo_claim = None
        self._solo_gate.clear()
        try:
            await self._solo_quiet.wait()
        finally:
            self._solo_gate.set()

    async def _lifecycle_tick(
        self, name: str, handler: LifecycleHandler
    ) -> tuple[tuple[str, ...], ApplyOutcome, tuple[str, ...], str | None]:
        await self._solo_gate.wait()
        solo = self.solo_claim if self.claim_owner is not None else None
        if solo is None:
            return await self._lifecycle_run(name, handler, self.clock.time(), None)
        self._solo_ticks += 1
        self._solo_quiet.clear()
        try:
            return await self._lifecycle_run(name, handler, self.clock.time(), solo)
        finally:
            self._solo_ticks -= 1
            if not self._solo_ticks:
                self._solo_quiet.set()

    async def _lifecycle_run(
        self, name: str, handler: LifecycleHandler, started: float, solo: Claim | None
    ) -> tuple[tuple[str, ...], ApplyOutcome, tuple[str, ...], str | None]:
        options = self._options[name]
        kind = self.kinds[handler.kind]
        claim = solo or (
            Claim(self.claim_owner, new_id(), started + self.claim_ttl, self.claim_ttl)
            if self.claim_owner is not None
            else None
        )
        targets = await self.store.fetch_lifecycle_targets(
            name,
            kind.name,
            handler.target_statuses,
            # Read every tick: a handler's filters may bind new values each time.
            _fetch_filters_with_timeout(handler, name, options.timeout),
            options.batch_size,
            now=started,
            claim=claim,
            order=options.order,
        )
        if not targets:
            return (), _NOTHING, (), None
        claimed = [t.id for t in targets]
        try:
            transitions = type(handler).status_transitions()
            # No transaction is open here: the handler may do slow I/O.
            keeper = (
                asyncio.create_task(self._keep_claim(name, claim, claimed))
                if claim is not None and self.renew_claims
                else None
            )
            try:
                result, outcomes, ignored, error = await _execute(
                    name, handler, targets, transitions, kind, self.kinds, self.max_creations
                )
            finally:
                if keeper is not None:
                    keeper.cancel()
                    await asyncio.gather(keeper, return_exceptions=True)
            now = self.clock.time()
            rules = Rules(
                kind=kind,
                transitions=transitions,
                now=now,
                options_for=lambda s: session_options(options, s, name),
                max_requeues_for=self.max_requeues_for,
                budget_limit_for=self.budget_limit_for,
            )
            changes = classify(targets, outcomes, rules)
            moves = [
                Move(eid, m.expected, m.to, m.status_info, m.fails)
                for eid, m in result.moves.items()
            ]
            outcome = await self.store.apply(
                name,
                changes,
                now=now,
                inject_failure=self.inject_apply_failure,
                claim=claim,
                claimed=claimed,
                moves=moves,
            )
        except BaseException:
            # The tick is lost (the apply failed, or shutdown cancelled it): give the
            # entities back now rather than after the claim's expiry.
            if claim is not None:
                try:
                    await asyncio.shield(self.store.release_claims(claim, claimed))
                except Exception as error:
                    log.warning("releasing the claims of %s failed: %s", name, error)
            raise
        return tuple(claimed), outcome, ignored, error

    async def _keep_claim(self, name: str, claim: Claim, ids: Sequence[str]) -> None:
        """Renew ``claim`` on ``ids`` every third of ``claim_ttl`` until cancelled."""
        while True:
            await asyncio.sleep(self.claim_ttl / 3)
            try:
                await self.store.renew_claims(claim, ids, self.clock.time() + self.claim_ttl)
            except Exception as error:  # the claim may lapse: the apply is fenced then
                log.warning("renewing the claims of %s failed: %s", name, error)

    async def _promotion_tick(self, name: str, rule: PromotionRule) -> tuple[int, ApplyOutcome]:
        outcome = await self.store.promote(
            rule,
            self._options[name].batch_size,
            now=self.clock.time(),
            inject_failure=self.inject_apply_failure,
            by=self.claim_owner,
        )
        return len(outcome.changes), outcome


class _Watched:
    """Awaits ``execute()`` step by step, logging any step that holds the event loop too long.

    A handler that calls blocking code stalls every other handler, backend and
    the web dashboard; timing each step the loop spends inside the coroutine
    names the culprit.
    """

    def __init__(self, awaitable: Awaitable[Any], name: str) -> None:
        self._iterator = awaitable.__await__()
        self._name = name

    def _check(self, started: float) -> None:
        held = time.perf_counter() - started
        if held > BLOCKING_THRESHOLD:
            log.warning(
                "handler %s blocked the event loop for %.1fs inside execute(): "
                "use await, or run blocking code with asyncio.to_thread",
                self._name,
                held,
                extra={"handler": self._name, "blocked_s": round(held, 3)},
            )

    def __await__(self) -> Generator[Any, Any, Any]:
        iterator = self._iterator
        value: Any = None
        thrown: BaseException | None = None
        while True:
            started = time.perf_counter()
            try:
                step = iterator.throw(thrown) if thrown is not None else iterator.send(value)
            except StopIteration as stop:
                self._check(started)
                return stop.value
            except BaseException:
                self._check(started)
                raise
            self._check(started)
            try:
                value, thrown = (yield step), None
            except BaseException as error:  # delivered into the handler, as await would
                value, thrown = None, error


async def _execute(
    name: str,
    handler: LifecycleHandler,
    targets: Sequence[Target],
    transitions: StatusTransitions | None,
    kind: EntityKind | None,
    kinds: Kinds,
    max_creations: int | None = None,
) -> tuple[HandlerResult, TargetOutcomes, tuple[str, ...], str | None]:
    """Await the handler and read what it said per target. Never raises for the handler's
    faults.

    A handler that raises (any Exception, SystemExit, KeyboardInterrupt, or a
    CancelledError of its own) or returns an invalid result has every target SKIPPED with an error
    code: its fault is not evidence against the sessions, so no try is counted
    (expiry is still judged). Only a real cancellation of this tick propagates.
    """
    ids = [t.id for t in targets]
    try:
        result = await _Watched(handler.execute(targets), name)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        return _faulty(name, ids, HANDLER_ERROR, "CancelledError raised inside execute()")
    except (Exception, SystemExit, KeyboardInterrupt) as error:
        # SystemExit and KeyboardInterrupt from a handler must not stop the daemon
        # (the daemon's own signals arrive through the event loop, not as these).
        log.error("handler %s raised; its targets are skipped", name, exc_info=error)
        return _faulty(name, ids, HANDLER_ERROR, f"{type(error).__name__}: {error}")
    if not isinstance(result, HandlerResult):
        return _faulty(
            name,
            ids,
            INVALID_RESULT,
            f"execute() returned {type(result).__name__}, not HandlerResult",
        )
    known = set(ids)
    outcomes = result.per_target()
    ignored = outcomes.ignored(known)
    if ignored:
        log.warning("handler %s reported ids that were not among its targets: %s", name, ignored)
    problem = (
        outcomes.problem(known)
        or _kind_problem(outcomes, transitions, kind)
        or _moves_problem(result, known)
        or _creations_problem(result, max_creations)
    )
    if problem is None and result.create:
        try:
            checked = check_new_entities(result.create, kinds)
        except InvalidSpecError as error:
            problem = f"cannot create: {error}"
        else:
            result = attrs.evolve(result, create=checked)
            outcomes = result.per_target()
    if problem is not None:
        result, outcomes, _, text = _faulty(name, ids, INVALID_RESULT, f"invalid result: {problem}")
        return result, outcomes, ignored, text
    return result, outcomes, ignored, None


def _kind_problem(
    outcomes: TargetOutcomes, transitions: StatusTransitions | None, kind: EntityKind | None
) -> str | None:
    """A named outcome the handler does not declare, or a budget or pool its kind lacks."""
    declared = transitions.outcomes if transitions is not None else {}
    budgets = {b.name for b in kind.budgets} if kind is not None else set()
    pools = kind.pools if kind is not None else ()
    for entity_id in outcomes.carrying:
        outcome = outcomes.by_id[entity_id]
        if outcome.reported is Reported.NAMED and outcome.name not in declared:
            return f"outcome {outcome.name!r} (for {entity_id}) is not declared: {sorted(declared)}"
        if outcome.budget is not None and outcome.budget not in budgets:
            return (
                f"budget {outcome.budget!r} (for {entity_id}) is not one of its kind's: "
                f"{sorted(budgets)}"
            )
        for pool in outcome.claims or {}:
            if not takes_claim(pools, pool):
                claimed = sorted(p.name for p in pools if p.claimed)
                return (
                    f"claim on pool {pool!r} (for {entity_id}) is not one of its kind's "
                    f"claimed pools: {claimed}"
                )
    return None


def _moves_problem(result: HandlerResult, known: set[str]) -> str | None:
    """A targeted move of one of the tick's own targets."""
    for entity_id in result.moves:
        if entity_id in known:
            return f"move of {entity_id}, a target: report its outcome instead"
    return None


def _creations_problem(result: HandlerResult, max_creations: int | None) -> str | None:
    """More creations than one tick may make."""
    if max_creations is not None and len(result.create) > max_creations:
        # One tick's apply is one transaction: its size is bounded like every count.
        return (
            f"it creates {len(result.create)} entities, more than one tick may "
            f"(limits.creations_per_tick = {max_creations})"
        )
    return None


def _faulty(
    name: str, ids: list[str], code: str, text: str
) -> tuple[HandlerResult, TargetOutcomes, tuple[str, ...], str]:
    if code == INVALID_RESULT:
        log.error("handler %s: %s; its targets are skipped", name, text)
    result = HandlerResult(
        skipped=ids, messages=dict.fromkeys(ids, text), error_codes=dict.fromkeys(ids, code)
    )
    return result, result.per_target(), (), text


def _fetch_filters_with_timeout(
    handler: LifecycleHandler, name: str, timeout: float | None
) -> tuple[CandidateFilter, ...]:
    """:func:`fetch_filters`, plus the :class:`TimedOut` of the handler's watched statuses."""
    filters = fetch_filters(handler)
    watched = frozenset(str(s) for s in handler.watched_statuses)
    if not watched:
        return filters
    return (*filters, TimedOut(watched, name, timeout))
