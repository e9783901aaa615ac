"""``drover why SESSION``: why a session is where it is, in plain words.

The diagnosis is built from the session, its kernels, its history and the
loaded handlers (their targets, kernel filters, promotion conditions and
resolved options), so it stays true for plugin handlers too.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from drover.coordinator.handlers import Handler, LifecycleHandler, target_statuses
from drover.inspection._format import duration
from drover.kinds.sessions.values import (
    SESSION_KIND,
    TERMINAL_SESSION_STATUSES,
    SessionStatus,
    SessionWithKernels,
)
from drover.model.kinds import EntityKind
from drover.model.options import session_options
from drover.model.plan import STALE_STATUS
from drover.model.promotion import PromotionRule
from drover.model.rules import MATCH_CONDITIONS, promotion_matches
from drover.model.status import SchedulingResult
from drover.model.values import Entity, HandlerOptions, HistoryRecord
from drover.storage.queries import Queries

if TYPE_CHECKING:
    # Only named: `drover show` formats exits with this module and never runs a tick.
    from drover.coordinator.tick import Coordinator

__all__ = [
    "Diagnosis",
    "describe_exit",
    "diagnose",
    "diagnose_entity",
    "status_info_meaning",
]

_TROUBLE = {SchedulingResult.NEED_RETRY, SchedulingResult.SKIPPED, SchedulingResult.EXPIRED,
            SchedulingResult.GIVE_UP}  # fmt: skip


@attrs.frozen
class Diagnosis:
    """The answer to "why is this session here?"."""

    session_id: str
    name: str
    status: SessionStatus | str
    held_for_s: float
    terminal: bool
    lines: tuple[str, ...]
    owners: tuple[dict[str, Any], ...] = ()
    last_problem: dict[str, Any] | None = None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe_exit(exit_code: int | None) -> str | None:
    """A kernel's recorded exit as ``show`` prints it: ``3``, or ``SIGKILL`` for ``-9``.

    Backends record a death by signal as the negative signal number (see
    docs/daemon.md), never as a shell-style ``128 + N``.
    """
    if exit_code is None:
        return None
    return _signal_name(-exit_code) if exit_code < 0 else str(exit_code)


def _kernel_summary(session: SessionWithKernels) -> str:
    if not session.kernels:
        return "no kernels"
    parts = []
    for index, kernel in enumerate(session.kernels, start=1):
        text = f"k{index} {kernel.status}"
        if kernel.exit_code is not None and kernel.exit_code < 0:
            text += f" (killed by {describe_exit(kernel.exit_code)})"
        elif kernel.exit_code is not None:
            text += f" (exit {kernel.exit_code})"
        if kernel.status_info:
            text += f" [{kernel.status_info}]"
        parts.append(text)
    return ", ".join(parts)


def _is_trouble(row: HistoryRecord) -> bool:
    # A stale-status row is a harmless race between handlers, not a problem.
    return row.result in _TROUBLE and row.error_code != STALE_STATUS


def _last_problem(rows: list[HistoryRecord], status: str) -> HistoryRecord | None:
    """The latest failure/skip row recorded while the session held its current status."""
    for row in reversed(rows):
        if row.from_status != status or row.to_status != status:
            return row if _is_trouble(row) else None
        if _is_trouble(row):
            return row
    return None


def _promotion_wait(rule: PromotionRule, session: SessionWithKernels) -> str:
    listed = ", ".join(sorted(str(s) for s in rule.kernel_statuses))
    condition = MATCH_CONDITIONS[rule.match]
    inside = [
        f"k{i} is {k.status}"
        for i, k in enumerate(session.kernels, start=1)
        if k.status in rule.kernel_statuses
    ]
    outside = [
        f"k{i} is {k.status}"
        for i, k in enumerate(session.kernels, start=1)
        if k.status not in rule.kernel_statuses
    ]
    if condition.none_in:
        wanted, blocking = f"waits until no kernel is in {listed}", inside
    elif condition.none_outside:
        wanted, blocking = f"waits until every kernel is in {listed}", outside
    else:
        wanted, blocking = f"acts as soon as any kernel is in {listed}", []
    if promotion_matches(rule.match, (k.status for k in session.kernels), rule.kernel_statuses):
        state = "the condition holds: it moves at its next tick"
    elif not session.kernels:
        state = "the session has no kernels, so it never matches"
    elif blocking:
        state = "; ".join(blocking)
    else:
        state = "none is yet"
    return f"{rule.name} → {rule.to_status}: {wanted}; {state}"


def _lifecycle_owner(
    name: str,
    handler: LifecycleHandler,
    session: SessionWithKernels,
    options: HandlerOptions,
    held: float,
) -> tuple[dict[str, Any], str]:
    """A lifecycle handler owning the session's status: its ``owners`` entry and its line
    (its timeout, the session's tries, and whether its kernel filter lets it fetch the
    session at all)."""
    opts = session_options(options, session, name)
    owner: dict[str, Any] = {
        "handler": name,
        "kind": "lifecycle",
        "timeout_s": opts.timeout,
        "max_retries": opts.max_retries,
    }
    text = f"{name} owns {session.status}"
    if opts.timeout is None:
        text += " (no timeout)"
    else:
        left = opts.timeout - held
        owner["expires_in_s"] = round(left, 3)
        if left > 0:
            text += f"; expires in {duration(left)} (timeout {duration(opts.timeout)})"
        else:
            text += (
                f"; its timeout ({duration(opts.timeout)}) passed {duration(-left)} ago:"
                " it expires at the handler's next tick"
            )
    limit = "no limit" if opts.max_retries is None else f"max_retries {opts.max_retries}"
    tries = session.tries.get(name, 0)
    owner["tries"] = tries
    text += f"; tries {tries} ({limit})"
    kernel_filter = handler.target_kernel_statuses
    if kernel_filter is not None and not any(k.status in kernel_filter for k in session.kernels):
        listed = ", ".join(sorted(str(s) for s in kernel_filter))
        text += (
            f"; but it only fetches sessions with a kernel in {listed}, and none is:"
            " it will not act on this session"
        )
        owner["fetches_it"] = False
    else:
        owner["fetches_it"] = True
    return owner, text


def _lifecycle_next(
    name: str, handler: LifecycleHandler, owner: Mapping[str, Any], status: str
) -> str:
    """``schedule-sessions acts on it at its next tick (→ SCHEDULED on success)``."""
    success = type(handler).status_transitions().success
    to = success.to if success is not None else None
    to_text = f" (→ {to} on success)" if to and to != status else ""
    expires = owner.get("expires_in_s")
    when = ", where it expires" if expires is not None and expires <= 0 else ""
    return f"{name} acts on it at its next tick{when}{to_text}"


#: How the last problem's result reads in ``last: <verb> …``.
_PROBLEM_VERBS: dict[str, str] = {
    SchedulingResult.SKIPPED: "skipped",
    SchedulingResult.NEED_RETRY: "failed",
    SchedulingResult.EXPIRED: "expired",
    SchedulingResult.GIVE_UP: "gave up",
}


def _problem(row: HistoryRecord) -> tuple[str, dict[str, Any]]:
    """The session's last problem in its status: its ``last: …`` line and its JSON."""
    verb = _PROBLEM_VERBS.get(row.result, str(row.result).lower())
    times = "once" if row.attempts == 1 else f"{row.attempts} times"
    reason = row.message or row.error_code or "no reason given"
    last = {
        "handler": row.handler,
        "result": str(row.result),
        "attempts": row.attempts,
        "error_code": row.error_code,
        "message": row.message,
    }
    return f"last: {verb} {times} by {row.handler}: {reason}", last


def diagnose(
    session: SessionWithKernels,
    rows: list[HistoryRecord],
    handlers: Mapping[str, Handler],
    options_for: Callable[[str], HandlerOptions],
    now: float,
    requeue_limit: int | None = None,
) -> Diagnosis:
    """Build the diagnosis from already-read data (pure; see :func:`diagnose_session`).

    ``requeue_limit`` is the session's requeue budget (``None``: no limit).
    """
    held = now - session.status_changed_at.timestamp()
    lines = [
        f"{session.name} ({session.id}) is {session.status}, "
        f"for {duration(held)} (since {session.status_changed_at:%Y-%m-%d %H:%M:%S} UTC)"
    ]
    if session.status in TERMINAL_SESSION_STATUSES:
        return _terminal(session, rows, held, lines, handlers)
    owners: list[dict[str, Any]] = []
    # What acts at its next tick (a lifecycle handler that fetches the session, a
    # promotion whose condition holds), and what only waits for a condition.
    acting: list[str] = []
    waits: list[str] = []
    for name, handler in sorted(handlers.items()):
        if isinstance(handler, PromotionRule):
            if handler.kind == session.kind and session.status in handler.from_statuses:
                owners.append({"handler": name, "kind": "promotion"})
                holds = promotion_matches(
                    handler.match, (k.status for k in session.kernels), handler.kernel_statuses
                )
                (acting if holds else waits).append(_promotion_wait(handler, session))
            continue
        if handler.kind == session.kind and session.status in handler.target_statuses:
            owner, text = _lifecycle_owner(name, handler, session, options_for(name), held)
            lines.append(text)
            owners.append(owner)
            if owner["fetches_it"]:
                acting.append(_lifecycle_next(name, handler, owner, session.status))
    if not owners:
        lines.append(f"no loaded handler targets {session.status}: nothing will move it")
    if session.requeues:
        budget = "no limit" if requeue_limit is None else f"max_requeues {requeue_limit}"
        lines.append(
            f"requeues: sent back {session.requeues} time(s) by expiry or give-up ({budget}; "
            "past it the session ends in ERROR)"
        )
    problem = _last_problem(rows, session.status)
    last: dict[str, Any] | None = None
    if problem is not None:
        line, last = _problem(problem)
        lines.append(line)
    lines.append(f"kernels: {_kernel_summary(session)}")
    # Named next: what will act. A condition that does not hold now (a kernel that
    # failed, for detect-start-failure) is only watched while something else acts.
    lines.extend(f"next: {text}" for text in acting)
    lines.extend(f"{'watching' if acting else 'next'}: {wait}" for wait in waits)
    return Diagnosis(
        session_id=session.id,
        name=session.name,
        status=session.status,
        held_for_s=held,
        terminal=False,
        lines=tuple(lines),
        owners=tuple(owners),
        last_problem=last,
    )


#: What the built-in handlers' status_info values mean; a plugin's handler says
#: what its own mean with ``LifecycleHandler.status_info_meanings``.
_BUILTIN_MEANINGS = {
    "USER_REQUESTED": "a termination was requested",
    "KERNEL_EXITED": "its kernels exited by themselves",
    "ABNORMAL_TERMINATION": "a kernel ended in ERROR",
    "START_FAILED": "a kernel failed before it could run",
}


def status_info_meaning(
    status_info: str | None, handlers: Mapping[str, Handler], by: str | None = None
) -> str | None:
    """What ``status_info`` means: the words of handler ``by`` (who wrote it), any loaded
    handler's, or the built-in ones; ``None`` if nobody says."""
    if not status_info:
        return None
    ordered = [handlers[by]] if by is not None and by in handlers else []
    ordered += [h for name, h in sorted(handlers.items()) if name != by]
    for handler in ordered:
        meanings = getattr(handler, "status_info_meanings", None) or {}
        if status_info in meanings:
            return str(meanings[status_info])
    return _BUILTIN_MEANINGS.get(status_info)


def _how_it_ended(status: str, rows: list[HistoryRecord]) -> str | None:
    """``it ended by <handler> (<result>: <message>) from <status>``, from the row that ended it.

    Any kind's: a child ended with its parent has that row too (``MOVED``, by the
    parent's handler), as has an entity a report ended.
    """
    into = [r for r in rows if r.to_status == status]
    # The move into it; an entity created ended has only its creation.
    ending = next((r for r in reversed(into) if r.from_status != status), None) or next(
        iter(into), None
    )
    if ending is None:
        return None
    how = f"it ended by {ending.handler} ({ending.result}"
    how += f": {ending.message})" if ending.message else ")"
    return how + f" from {ending.from_status}"


def _terminal(
    session: SessionWithKernels,
    rows: list[HistoryRecord],
    held: float,
    lines: list[str],
    handlers: Mapping[str, Handler],
) -> Diagnosis:
    how = _how_it_ended(str(session.status), rows)
    if how is not None:
        lines.append(how)
    meaning = status_info_meaning(session.status_info, handlers)
    lines.append(
        f"result {session.result or '-'}; status_info {session.status_info or '-'}"
        + (f" ({meaning})" if meaning else "")
    )
    problem = next((r for r in reversed(rows) if _is_trouble(r)), None)
    if problem is not None:
        lines.append(
            f"last trouble before the end: {problem.result} x{problem.attempts} by "
            f"{problem.handler} in {problem.from_status}: "
            f"{problem.message or problem.error_code or 'no reason given'}"
        )
    lines.append(f"kernels: {_kernel_summary(session)}")
    return Diagnosis(
        session_id=session.id,
        name=session.name,
        status=session.status,
        held_for_s=held,
        terminal=True,
        lines=tuple(lines),
    )


async def diagnose_session(
    repo: Queries, coordinator: Coordinator, session_id: str, now: float
) -> Diagnosis:
    """Read the session and its history, then :func:`diagnose` it with the loaded handlers."""
    session = await repo.read_one(SESSION_KIND, session_id)
    rows = await repo.history(session_id)
    return diagnose(
        session,
        rows,
        coordinator.handlers,
        coordinator.options,
        now,
        coordinator.max_requeues_for(session),
    )


def diagnose_entity(
    entity: Entity,
    rows: list[HistoryRecord],
    handlers: Mapping[str, Handler],
    kind: EntityKind,
    now: float,
) -> Diagnosis:
    """Why an entity of any kind is where it is: its status, who acts on it, its last trouble.

    Sessions get the richer :func:`diagnose`; this serves every other kind.
    """
    status = str(entity.status)
    held = now - entity.status_changed_at.timestamp()
    terminal = status in kind.terminal
    lines = [f"{kind.name} {entity.id} is {status} (held for {duration(held)})"]
    if entity.status_info:
        meaning = status_info_meaning(entity.status_info, handlers)
        lines.append(f"status_info: {entity.status_info}" + (f" ({meaning})" if meaning else ""))
    if entity.children:
        counts: dict[str, int] = {}
        for child in entity.children:
            counts[str(child.status)] = counts.get(str(child.status), 0) + 1
        summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        lines.append(f"children: {summary}")
    owners: list[dict[str, Any]] = []
    if terminal:
        how = _how_it_ended(status, rows)
        if how is not None:
            lines.append(how)
        lines.append(
            f"it has ended (result {entity.result or '-'}); nothing will move it but a reopen"
        )
    else:
        for name, handler in sorted(handlers.items()):
            if handler.kind != kind.name or status not in {
                str(s) for s in target_statuses(handler)
            }:
                continue
            what = "promotion" if isinstance(handler, PromotionRule) else "lifecycle"
            owners.append({"handler": name, "type": what})
            lines.append(f"{name} ({what}) acts on {kind.name}s in {status}")
        if not owners:
            lines.append(f"no loaded handler acts on {kind.name}s in {status}: it will stay")
    if entity.budgets and any(use.used for use in entity.budgets.values()):
        spent = ", ".join(f"{b} {use}" for b, use in sorted(entity.budgets.items()))
        lines.append(f"budgets spent (used/limit): {spent}")
    problem = _last_problem(rows, status)
    last: dict[str, Any] | None = None
    if problem is not None:
        reason = problem.message or problem.error_code or "no reason given"
        lines.append(f"last: {str(problem.result).lower()} by {problem.handler}: {reason}")
        last = {"handler": problem.handler, "result": str(problem.result), "message": reason}
    return Diagnosis(
        entity.id,
        entity.name or "",
        status,
        held,
        terminal,
        tuple(lines),
        tuple(owners),
        last,
    )
