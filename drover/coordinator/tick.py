"""The coordinator: one tick of a handler is fetch, execute, classify, apply."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from drover.coordinator.classify import classify
from drover.coordinator.handlers import Handler, LifecycleHandler, SessionPromotionHandler
from drover.model.clock import Clock, SystemClock
from drover.model.errors import UnknownHandlerError
from drover.model.options import (
    merge_options,
    overrides_from,
    session_options,
    validate_options,
)
from drover.model.plan import AppliedChange, ApplyOutcome, Change, TryCount
from drover.model.status import SchedulingResult, SessionStatus
from drover.model.values import HandlerOptions, HandlerResult, SessionWithKernels
from drover.storage.repository import Repository

__all__ = ["HANDLER_ERROR", "INVALID_RESULT", "Coordinator", "TickReport"]

log = logging.getLogger("drover.coordinator")

#: Error code when ``execute`` raised.
HANDLER_ERROR = "handler-error"
#: Error code when the handler's result listed one id in two lists.
INVALID_RESULT = "invalid-result"

_NOTHING = ApplyOutcome(changes=())


@attrs.frozen
class TickReport:
    """What one tick of one handler did."""

    handler: str
    fetched: int
    changes: tuple[AppliedChange, ...]
    duration: float
    ignored_ids: tuple[str, ...] = ()
    kernel_changes: int = 0

    @property
    def counts(self) -> dict[SchedulingResult, int]:
        """Sessions per result class (stale sessions count as SKIPPED)."""
        return dict(Counter(c.result for c in self.changes))

    @property
    def moved_to(self) -> dict[SessionStatus, int]:
        """Sessions per status they were moved into by this tick."""
        return dict(Counter(c.to_status for c in self.changes if c.to_status != c.from_status))

    def count(self, result: SchedulingResult) -> int:
        """How many sessions got ``result`` in this tick."""
        return sum(1 for c in self.changes if c.result == result)


class Coordinator:
    """Runs ticks of loaded handlers against a repository.

    ``options`` maps a handler name to configuration overrides (a mapping of
    fields, or a :class:`HandlerOptions`); they sit between the handler's own
    ``default_options()`` and each session's ``spec["options"][name]``.
    """

    def __init__(
        self,
        repository: Repository,
        handlers: Mapping[str, Handler],
        *,
        options: Mapping[str, HandlerOptions | Mapping[str, Any]] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.repository = repository
        self.handlers = dict(handlers)
        self.clock: Clock = clock or SystemClock()
        self._options: dict[str, HandlerOptions] = {}
        unknown = sorted(set(options or {}) - set(self.handlers))
        if unknown:
            log.warning(
                "options given for handler(s) %s, which are not loaded; loaded: %s",
                unknown,
                sorted(self.handlers),
            )
        for name, handler in self.handlers.items():
            base = type(handler).default_options()
            layer = overrides_from((options or {}).get(name))
            self._options[name] = validate_options(
                merge_options(base, layer), where=f"options of handler {name!r}"
            )
        #: Test hook: called between apply steps with the step's name.
        self.inject_apply_failure: Callable[[str], None] | None = None

    def options(self, name: str) -> HandlerOptions:
        """The resolved (handler default + configuration) options of handler ``name``."""
        self._handler(name)
        return self._options[name]

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
        if isinstance(handler, SessionPromotionHandler):
            fetched, outcome, ignored = await self._promotion_tick(name, handler)
        else:
            fetched, outcome, ignored = await self._lifecycle_tick(name, handler)
        report = TickReport(
            handler=name,
            fetched=fetched,
            changes=outcome.changes,
            duration=time.perf_counter() - started,
            ignored_ids=ignored,
            kernel_changes=outcome.kernel_changes,
        )
        log.debug(
            "tick %s: fetched=%d counts=%s duration=%.3fs",
            name,
            fetched,
            {str(k): v for k, v in report.counts.items()},
            report.duration,
        )
        return report

    async def _lifecycle_tick(
        self, name: str, handler: LifecycleHandler
    ) -> tuple[int, ApplyOutcome, tuple[str, ...]]:
        options = self._options[name]
        targets = await self.repository.fetch_lifecycle_targets(
            handler.target_session_statuses, handler.target_kernel_statuses, options.batch_size
        )
        if not targets:
            return 0, _NOTHING, ()
        # No transaction is open here: the handler may do slow I/O.
        result, ignored = await _execute(name, handler, targets)
        now = self.clock.time()
        changes = classify(
            targets,
            result,
            type(handler).status_transitions(),
            lambda s: session_options(options, s, name),
            now,
        )
        outcome = await self.repository.apply(
            name, changes, now=now, inject_failure=self.inject_apply_failure
        )
        return len(targets), outcome, ignored

    async def _promotion_tick(
        self, name: str, handler: SessionPromotionHandler
    ) -> tuple[int, ApplyOutcome, tuple[str, ...]]:
        options = self._options[name]
        candidates = await self.repository.fetch_promotion_candidates(
            handler.target_session_statuses,
            handler.check_kernel_statuses,
            handler.match_type,
            options.batch_size,
        )
        if not candidates:
            return 0, _NOTHING, ()
        to_status = type(handler).success_session_status()
        rule = type(handler).status_info_rule()
        changes = [
            Change(
                session_id=sid,
                from_status=status,
                result=SchedulingResult.SUCCESS,
                to_session=to_status,
                try_count=TryCount.RESET,
                status_info=rule,
            )
            for sid, status in candidates
        ]
        outcome = await self.repository.apply(
            name, changes, now=self.clock.time(), inject_failure=self.inject_apply_failure
        )
        return len(candidates), outcome, ()


async def _execute(
    name: str, handler: LifecycleHandler, targets: Sequence[SessionWithKernels]
) -> tuple[HandlerResult, tuple[str, ...]]:
    """Await the handler and normalise what it said. Never raises for the handler's faults."""
    ids = [t.id for t in targets]
    try:
        result = await handler.execute(targets)
    except Exception as error:
        log.exception("handler %s raised; every target counts as a failure", name)
        text = f"{type(error).__name__}: {error}"
        return (
            HandlerResult(
                failures=ids,
                messages=dict.fromkeys(ids, text),
                error_codes=dict.fromkeys(ids, HANDLER_ERROR),
            ),
            (),
        )
    if not isinstance(result, HandlerResult):
        text = f"execute() returned {type(result).__name__}, not HandlerResult"
        log.error("handler %s: %s", name, text)
        return _all_failed(ids, text), ()
    known = set(ids)
    listed = [*result.successes, *result.failures, *result.skipped]
    ignored = tuple(dict.fromkeys(i for i in listed if i not in known))
    if ignored:
        log.warning("handler %s reported ids that were not among its targets: %s", name, ignored)
    seen: Counter[str] = Counter(i for i in listed if i in known)
    # The same id twice in one list is as contradictory as in two lists.
    duplicated = sorted(i for i, n in seen.items() if n > 1)
    if duplicated:
        text = f"result lists session(s) {duplicated} more than once"
        log.error("handler %s: invalid result: %s", name, text)
        return _all_failed(ids, text), ignored
    return result, ignored


def _all_failed(ids: list[str], text: str) -> HandlerResult:
    return HandlerResult(
        failures=ids,
        messages=dict.fromkeys(ids, text),
        error_codes=dict.fromkeys(ids, INVALID_RESULT),
    )
