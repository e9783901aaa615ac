"""The one check of a new entity, whoever creates it.

The API and CLI (``drover submit``, ``drover deploy``, ``Repository.create_entities``),
the test harness and the apply (a handler's ``HandlerResult.create``) all
create entities through :func:`check_new_entities`: the same input is
accepted or refused everywhere, with one line naming the problem, and nothing
is written when one entity of a batch is refused.

What it checks, for every kind: the kind, status, parent and name; the spec
as JSON both databases store alike; the spec keys the engine itself reads
(``options``, ``max_requeues``, ``budgets``, ``pools``); the kind's own spec check
(:attr:`~drover.model.kinds.EntityKind.check_spec`); and the same for each
child. What it gives back is the entity as it will be written: JSON-safe
copies, and a name for an entity created on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

import attrs

from drover.model.checks import (
    MAX_COUNT,
    check_name,
    check_priority,
    check_whole,
    is_finite,
    is_number,
)
from drover.model.checks import json_copy as _json_copy
from drover.model.errors import InvalidHandlerError, InvalidSpecError
from drover.model.kinds import EntityKind, Kinds
from drover.model.pools import POOLS_KEY, is_family, takes_claim
from drover.model.values import NewEntity

__all__ = [
    "CHILD_KEYS",
    "OPTION_KEYS",
    "amounts_text",
    "check_against_deployment",
    "check_limits",
    "check_new_entities",
    "check_spec_patch",
    "default_name",
    "fits_some_agent",
    "slot_amounts",
]

#: Handler options an entity may override in ``spec["options"][handler]``.
OPTION_KEYS = frozenset({"max_retries", "timeout"})
#: Keys of a child mapping in :attr:`NewEntity.children`.
CHILD_KEYS = frozenset({"kind", "status", "spec", "name", "agent_id", "priority"})


def default_name(kind: str, entity_id: str) -> str:
    """The name of an entity created without one: its kind and the end of its id."""
    return f"{kind}-{entity_id[-12:]}"


def slot_amounts(spec: Mapping[str, Any]) -> dict[str, float | int]:
    """The resource slots a spec asks for: every top-level number."""
    return {key: value for key, value in spec.items() if is_number(value)}


def amounts_text(amounts: Mapping[str, float], slots: Iterable[str]) -> str:
    """``cpu=2 mem=256``: the amounts of ``slots``, in that order (0 when missing)."""
    return " ".join(f"{slot}={float(amounts.get(slot, 0.0)):g}" for slot in slots)


def fits_some_agent(need: Mapping[str, float], capacities: Iterable[Mapping[str, float]]) -> bool:
    """Whether some agent, idle, could hold ``need`` (every slot at once, on one agent)."""
    return any(
        all(float(capacity.get(slot, 0.0)) >= amount for slot, amount in need.items())
        for capacity in capacities
    )


def _check_options(options: Any) -> None:
    if not isinstance(options, Mapping):
        raise InvalidSpecError("spec['options'] must map handler names to option tables")
    for handler, values in options.items():
        if not isinstance(values, Mapping):
            raise InvalidSpecError(f"spec['options'][{handler!r}] must be a table of options")
        for key, value in values.items():
            if key not in OPTION_KEYS:
                raise InvalidSpecError(
                    f"spec['options'][{handler!r}] has unknown option {key!r}; "
                    f"a spec may set {sorted(OPTION_KEYS)}"
                )
            if value is None:
                continue
            if key == "max_retries":
                check_whole(value, f"spec['options'][{handler!r}]['max_retries']")
            if key == "timeout" and (not is_number(value) or value <= 0 or not is_finite(value)):
                raise InvalidSpecError(
                    f"spec['options'][{handler!r}]['timeout'] must be a finite number of seconds "
                    f"> 0 or null, got {value!r}"
                )


def _check_budgets(budgets: Any, kind: EntityKind) -> None:
    if not isinstance(budgets, Mapping):
        raise InvalidSpecError("spec['budgets'] must map budget names to limits")
    declared = {b.name for b in kind.budgets}
    for name, limit in budgets.items():
        if name not in declared:
            raise InvalidSpecError(
                f"spec['budgets'] names {name!r}, which is not a budget of kind {kind.name!r}; "
                f"its budgets are {sorted(declared)}"
            )
        check_whole(limit, f"spec['budgets'][{name!r}]")


def _check_pool_claims(kind: EntityKind, spec: Mapping[str, Any]) -> None:
    """``spec["pools"]``, if set: units of the kind's ``claimed`` pools, each a positive
    integer."""
    claims = spec.get(POOLS_KEY)
    if claims is None:
        return
    claimable = sorted(p.name for p in kind.pools if p.claimed)
    families = (
        " (a family's: its prefix and a kebab-case suffix)"
        if any(is_family(n) for n in claimable)
        else ""
    )
    if not isinstance(claims, Mapping):
        raise InvalidSpecError(
            f"spec[{POOLS_KEY!r}] must map pool names to units, got {type(claims).__name__}"
        )
    for name, units in claims.items():
        if not isinstance(name, str) or not takes_claim(kind.pools, name):
            raise InvalidSpecError(
                f"spec[{POOLS_KEY!r}] names pool {name!r}, which kind {kind.name!r} does not "
                f"declare claimed; its claimed pools are {claimable}{families}"
            )
        if isinstance(units, bool) or not isinstance(units, int) or not 0 < units <= MAX_COUNT:
            raise InvalidSpecError(
                f"spec[{POOLS_KEY!r}][{name!r}] must be a whole number from 1 to {MAX_COUNT}, "
                f"got {units!r}"
            )


def check_limits(kind: EntityKind, spec: Mapping[str, Any], children: int | None = None) -> None:
    """Refuse a spec (and a number of ``children``) past the kind's limits (:class:`Limit`),
    and pool claims (``spec["pools"]``) the kind's pools do not take.

    Run on a new entity's spec and on a changed one (``update_spec``).
    """
    _check_pool_claims(kind, spec)
    for limit in kind.limits:
        if limit.spec_key is not None:
            try:
                check_whole(
                    spec.get(limit.spec_key), f"spec[{limit.spec_key!r}]", limit=limit.bound
                )
            except InvalidSpecError as error:
                raise InvalidSpecError(f"{error} (limits.{limit.name})") from None
        elif children is not None and children > limit.bound:
            raise InvalidSpecError(
                f"a new {kind.name} may have at most {limit.bound} children, got {children} "
                f"(limits.{limit.name})"
            )


def _checked_spec(spec: Any, kind: EntityKind, where: str) -> dict[str, Any]:
    """The spec as it will be stored, or InvalidSpecError naming ``where`` (``kernel 1``)."""
    what = f"{where} spec" if where != kind.name else f"{kind.name} spec"
    if not isinstance(spec, Mapping):
        raise InvalidSpecError(f"{what} must be a mapping, got {type(spec).__name__}")
    # The specific checks first, so their messages win over the JSON copy's general ones.
    check_whole(spec.get("max_requeues"), "spec['max_requeues']")
    if spec.get("options") is not None:
        _check_options(spec["options"])
    if spec.get("budgets") is not None:
        _check_budgets(spec["budgets"], kind)
    if kind.check_spec is not None:
        kind.check_spec(spec, where)
    copy: dict[str, Any] = _json_copy(spec, what)
    return copy


def _status(kind: EntityKind, status: Any, where: str, *, seeding: bool) -> str:
    if status not in kind.status_names:
        raise InvalidSpecError(
            f"{where}: unknown {kind.name} status {status!r}; "
            f"expected one of {list(kind.status_names)}"
        )
    if not seeding and kind.created_in is not None and status not in kind.created_in:
        starts = ", ".join(sorted(kind.created_in))
        raise InvalidSpecError(
            f"a new {kind.name} is {starts}; its status ({status}) is set by drover"
        )
    return str(status)


def _child(
    index: int, raw: Any, kind: EntityKind, child: EntityKind | None, parent_status: str, *,
    seeding: bool,
) -> dict[str, Any]:  # fmt: skip
    if not isinstance(raw, Mapping):
        raise InvalidSpecError(f"child {index} of a new {kind.name} must be a mapping")
    child_kind = raw.get("kind", child.name if child is not None else None)
    if child is None or child_kind != child.name:
        raise InvalidSpecError(
            f"child {index} of a new {kind.name}: kind {child_kind!r} is not "
            f"{kind.name!r}'s child kind ({child.name if child else 'none'})"
        )
    where = f"{child.name} {index}"
    unknown = sorted(set(raw) - CHILD_KEYS)
    if unknown:
        raise InvalidSpecError(f"{where}: unknown field(s) {unknown}; known: {sorted(CHILD_KEYS)}")
    if raw.get("agent_id") is not None and not seeding:
        raise InvalidSpecError(f"{where}: 'agent_id' is set by drover")
    status = raw.get("status")
    if status is None:
        # Children start with their parent when their kind has its status.
        status = parent_status if parent_status in child.status_names else child.first_status
    status = _status(child, status, where, seeding=seeding)
    if isinstance(raw.get("spec"), Mapping):
        # A child's claims, as check_limits checks its parent's.
        _check_pool_claims(child, raw["spec"])
    out: dict[str, Any] = {
        "status": status,
        "spec": _checked_spec(raw.get("spec") or {}, child, where),
        "name": check_name(raw.get("name")),
    }
    if raw.get("agent_id") is not None:
        out["agent_id"] = str(raw["agent_id"])
    if raw.get("priority") is not None:
        # A child competes in its own kind's queue (fetch order: priority first).
        out["priority"] = check_priority(raw["priority"])
    return out


def _check_one(new: NewEntity, kinds: Kinds, *, seeding: bool) -> NewEntity:
    try:
        kind = kinds[new.kind]
    except InvalidHandlerError as error:
        raise InvalidSpecError(str(error)) from None
    status = _status(kind, new.status or kind.first_status, f"a new {kind.name}", seeding=seeding)
    if kind.parent is not None and new.parent_id is None:
        raise InvalidSpecError(f"kind {kind.name!r} is a child of {kind.parent!r}: give parent_id")
    if kind.parent is None and new.parent_id is not None:
        raise InvalidSpecError(f"kind {kind.name!r} has no parent kind; it takes no parent_id")
    # First, before anything walks the children: a count past its bound is refused as it is.
    check_limits(kind, new.spec if isinstance(new.spec, Mapping) else {}, len(new.children))
    spec = _checked_spec(new.spec, kind, kind.name)
    priority = check_priority(new.priority)
    name = check_name(new.name) or default_name(kind.name, new.id)
    child = kinds.child_of(kind.name)
    children = tuple(
        _child(i, raw, kind, child, status, seeding=seeding)
        for i, raw in enumerate(new.children, start=1)
    )
    for relation, _target in new.links:
        if not relation or len(relation) > 64:
            raise InvalidSpecError(f"relation name {relation!r} must be 1-64 characters")
    return attrs.evolve(
        new, spec=spec, status=status, priority=priority, name=name, children=children
    )


def check_new_entities(
    news: Iterable[NewEntity], kinds: Kinds, *, seeding: bool = False
) -> list[NewEntity]:
    """Check every new entity; return them as they will be written.

    ``seeding`` is for tests and benchmarks that start entities midway through
    their lifecycle: statuses outside a kind's ``created_in`` and a child's
    ``agent_id`` are then allowed. Raises InvalidSpecError for the first
    problem found; the caller writes nothing.
    """
    return [_check_one(new, kinds, seeding=seeding) for new in news]


def check_spec_patch(patch: Any) -> dict[str, Any]:
    """A merge-patch of a spec, as JSON both databases store alike."""
    if not isinstance(patch, Mapping):
        raise InvalidSpecError(f"a spec patch must be a mapping, got {type(patch).__name__}")
    copy: dict[str, Any] = _json_copy(patch, "spec patch")
    return copy


def check_against_deployment(
    news: Sequence[NewEntity],
    kinds: Kinds,
    *,
    handlers: Collection[str],
    slots: Collection[str] | None,
    capacities: Mapping[str, Mapping[str, float]] | None = None,
    child_problem: Callable[[Mapping[str, Any]], str | None] | None = None,
) -> None:
    """Refuse what no part of this deployment could act on.

    ``handlers`` are the loaded handler names, ``slots`` every resource
    slot some agent offers (``None``: not known, not checked) and
    ``capacities`` each agent's capacity by agent id (``None`` or empty: not
    known, not checked): options for a handler that is not loaded would be
    silently ignored, and a child asking for a slot no agent has, or for more
    than any agent holds even when idle, would wait forever. ``child_problem``:
    why the backend would refuse the spec of a child it runs (one of a kind
    with resource slots), or ``None``: refused here, in one line, instead of
    failing once prepared.
    """
    for new in news:
        options = new.spec.get("options") or {}
        unknown = sorted(set(options) - set(handlers))
        if unknown:
            raise InvalidSpecError(
                f"options for unknown handler(s) {', '.join(repr(u) for u in unknown)}; "
                f"the loaded handlers are {', '.join(sorted(handlers))}"
            )
        child = kinds.child_of(new.kind)
        if child is None or child.resource_slots is None:
            continue
        if child_problem is not None:
            for index, raw in enumerate(new.children, start=1):
                problem = child_problem(raw.get("spec") or {})
                if problem:
                    raise InvalidSpecError(f"{child.name} {index}: {problem}")
        if slots is None:
            continue
        known = set(slots) | set(child.resource_slots)
        for index, raw in enumerate(new.children, start=1):
            strange = sorted(set(slot_amounts(raw.get("spec") or {})) - known)
            if strange:
                raise InvalidSpecError(
                    f"{child.name} {index}: no agent has the resource slot(s) "
                    f"{', '.join(repr(s) for s in strange)}; the known slots are "
                    f"{', '.join(sorted(known))}"
                )
            if capacities:
                _check_fits(child.name, index, raw.get("spec") or {}, capacities)


def _check_fits(
    what: str, index: int, spec: Mapping[str, Any], capacities: Mapping[str, Mapping[str, float]]
) -> None:
    need = {slot: float(v) for slot, v in slot_amounts(spec).items()}
    if fits_some_agent(need, capacities.values()):
        return
    slots = sorted(need)
    largest = max(sorted(capacities), key=lambda a: (float(capacities[a].get("cpu", 0.0)), a))
    raise InvalidSpecError(
        f"{what} {index} needs {amounts_text(need, slots)}: no agent is that large even "
        f"when idle (the largest, {largest}, has {amounts_text(capacities[largest], slots)})"
    )
