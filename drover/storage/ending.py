"""What a termination request does: each kind's rule, turned into changes for the apply.

Used by :meth:`drover.storage.apply.Apply.end`, for ``drover terminate`` (the API,
:meth:`drover.storage.entity_writes.EntityWrites.request_termination`) and for a
handler's ``HandlerResult.terminate``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import sqlalchemy as sa

from drover.model.errors import InvalidSpecError, UnknownEntityError
from drover.model.kinds import STOP_REQUESTED, EntityKind, Kinds
from drover.model.plan import AppliedChange, Change
from drover.model.status import SchedulingResult
from drover.model.values import StatusInfoRule, TerminationOutcome
from drover.storage._sql import chunked, statement
from drover.storage.inserts import API_SOURCE
from drover.storage.schema import entities

__all__ = ["end_entities", "entity_states", "termination_changes"]

_USER_REQUESTED = StatusInfoRule(default="USER_REQUESTED")
#: Times a termination whose compare-and-set lost is read again and retried.
_ROUNDS = 3

e = entities


def entity_states(postgres: bool) -> sa.Select[Any]:
    """Id, kind and status of the entities among ``:ids`` (a list), locked on PostgreSQL."""
    query = sa.select(e.c.id, e.c.kind, e.c.status).where(
        e.c.id.in_(sa.bindparam("ids", expanding=True))
    )
    return query.with_for_update() if postgres else query


#: The entities among ``:ids`` (a list) that are the parent of some entity.
_PARENTS_AMONG = (
    sa.select(e.c.parent_id)
    .where(e.c.parent_id.in_(sa.bindparam("ids", expanding=True)))
    .distinct()
)


def end_entities(
    conn: sa.Connection,
    ids: Sequence[str],
    source: str,
    apply: Callable[[list[Change]], Sequence[AppliedChange]],
    *,
    kinds: Kinds,
    postgres: bool,
    strict: bool = True,
    reason: str | None = None,
    mode: str | None = None,
) -> list[TerminationOutcome]:
    """End ``ids`` by :func:`termination_changes`, written by ``apply`` (which returns the
    changes it lost to a concurrent status change); return what each request did.

    A termination is never dropped while its caller is told it happened: one whose
    compare-and-set lost (the status it read changed before its write) is read
    again and applied from the entity's current status, up to a few times; one
    still lost is reported unchanged.
    """
    changes, outcomes = termination_changes(
        conn, ids, source, kinds=kinds, postgres=postgres, strict=strict, reason=reason,
        mode=mode,
    )  # fmt: skip
    lost = {c.entity_id for c in apply(changes)} if changes else set()
    gone: set[str] = set()
    for _ in range(_ROUNDS):
        if not lost:
            break
        again, retried = termination_changes(
            conn, sorted(lost), source, kinds=kinds, postgres=postgres, strict=False,
            reason=reason, mode=mode,
        )  # fmt: skip
        now = {o.session_id: o for o in retried}
        outcomes = [now.get(o.session_id, o) if o.session_id in lost else o for o in outcomes]
        gone |= lost - now.keys()
        lost = {c.entity_id for c in apply(again)} if again else set()
    unchanged = lost | gone
    if not unchanged:
        return outcomes
    return [
        attrs.evolve(o, to_status=o.from_status, changed=False) if o.session_id in unchanged else o
        for o in outcomes
    ]


def termination_changes(
    conn: sa.Connection,
    ids: Sequence[str],
    source: str,
    *,
    kinds: Kinds,
    postgres: bool,
    strict: bool = True,
    reason: str | None = None,
    mode: str | None = None,
) -> tuple[list[Change], list[TerminationOutcome]]:
    """The changes that end ``ids`` (any kind) by their kinds' termination rules, and what
    each request does (read in the caller's write transaction; the caller applies them).

    ``strict`` (the API): an unknown id raises UnknownEntityError and a
    kind that ends only with its parent InvalidSpecError, before anything
    is written. Otherwise (a handler's ``terminate``) such ids are left
    alone: the entity may have ended and gone meanwhile. ``reason`` (``drover
    terminate --reason``) is added to each history row's message. ``mode`` (``drover
    terminate --mode``) picks the kinds' rules of that mode; a kind without it raises
    InvalidSpecError before anything is written (``strict``) or is left alone. The mode
    is named in the history message and, without the rule's own, in ``status_info``
    (``USER_REQUESTED:<mode>``).
    """
    wanted = list(dict.fromkeys(ids))
    found: dict[str, tuple[str, str]] = {}
    with_children: set[str] = set()
    states = statement(("entity-states", postgres), lambda: entity_states(postgres))
    for chunk in chunked(wanted):
        for eid, kind, status in conn.execute(states, {"ids": chunk}):
            found[eid] = (kind, kinds.status(kind, status))
        with_children.update(r[0] for r in conn.execute(_PARENTS_AMONG, {"ids": chunk}))
    for eid in wanted:
        if eid not in found:
            if strict:
                raise UnknownEntityError(eid)
            continue
        kind = kinds[found[eid][0]]
        if not kind.terminable:
            if strict:
                raise InvalidSpecError(
                    f"{eid} is a {kind.name}: a {kind.name} ends with its {kind.parent}; "
                    "terminate that instead"
                )
            del found[eid]
            continue
        if mode is not None and mode not in kind.termination_modes:
            if strict:
                modes = sorted(kind.termination_modes)
                raise InvalidSpecError(
                    f"{eid} is a {kind.name}: no termination mode {mode!r} "
                    f"(its modes: {', '.join(modes) if modes else 'none'})"
                )
            del found[eid]
    info = (
        _USER_REQUESTED
        if source == API_SOURCE
        else StatusInfoRule(default=f"REQUESTED_BY_{source.upper().replace('-', '_')}")
    )
    if mode is not None:
        info = StatusInfoRule(default=f"{info.default}:{mode}")
    changes: list[Change] = []
    outcomes: list[TerminationOutcome] = []
    for eid in wanted:
        if eid not in found:
            continue
        kind_name, status = found[eid]
        kind = kinds[kind_name]
        rule = kind.termination_of(status, eid in with_children, mode)
        if rule is None:
            if strict and _unruled(kind, status, mode):
                raise InvalidSpecError(_no_rule(eid, kind, status, mode))
            outcomes.append(TerminationOutcome(eid, status, status, False, kind=kind_name))
            continue
        changes.append(
            Change(
                entity_id=eid,
                from_status=status,
                result=SchedulingResult.SUCCESS,
                to_status=rule.to,
                to_children=rule.children,
                children_info=rule.children_info,
                message=_message(rule.message, mode, reason),
                status_info=StatusInfoRule(default=rule.status_info) if rule.status_info else info,
                kind=kind_name,
                # Recorded for the result: a stop somebody asked for is CANCELLED.
                data={STOP_REQUESTED: source},
            )
        )
        to = kinds.status(kind_name, rule.to)
        outcomes.append(TerminationOutcome(eid, status, to, True, kind=kind_name))
    return changes, outcomes


def _unruled(kind: EntityKind, status: str, mode: str | None) -> bool:
    """Whether a request (in ``mode``) for a live entity in ``status`` finds no rule and is
    not already on its way out (in the status a rule of that mode ends in)."""
    if status in kind.terminal:
        return False
    return all(rule.to != status for rule in kind.termination if rule.mode == mode)


def _no_rule(eid: str, kind: EntityKind, status: str, mode: str | None) -> str:
    """The one-line refusal of a request that no termination rule of ``kind`` serves."""
    rules = [
        f"{'|'.join(sorted(r.from_statuses)) if r.from_statuses else 'any live status'}"
        f" -> {r.to}{f' (mode {r.mode})' if r.mode else ''}"
        for r in kind.termination
    ]
    mode_text = f" of mode {mode!r}" if mode is not None else ""
    return (
        f"{eid} is a {kind.name} in {status}: no termination rule{mode_text} applies "
        f"(its rules: {'; '.join(rules) if rules else 'none'}); nothing was changed"
    )


def _message(text: str, mode: str | None, reason: str | None) -> str:
    """A termination's history message: the rule's, its mode, then who-asked's reason."""
    if mode is not None:
        text = f"{text} (mode {mode})"
    return f"{text}: {reason}" if reason else text
