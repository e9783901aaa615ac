"""Entity kinds: each lifecycle drover runs is a kind with its own statuses.

A kind names a ``StrEnum`` of statuses, which of them are terminal, and
optionally a parent kind (its entities are then children of one entity of
that kind, as kernels are of a session). The engine has no other knowledge
of a kind: its rules below are derived from this declaration.

* **Lifecycle order** is the enum's declaration order; terminal statuses share
  the last rank. It decides when a transition is a *requeue* (sent back) and
  which children a transition may move (only those behind it).
* **Children of an ended entity** never stay live: a transition into a
  terminal status that does not say what the children become ends them with
  the child kind's status of the same name, else its first terminal status
  that is not a success (a cancelled job's tasks did not succeed).
* **Result**: an entity a handler moved for a fault (``MoveTo(fails=True)``,
  recorded in its ``data`` under :data:`FAILED_BECAUSE`: a replica evicted for
  failing its health checks) gets FAILURE whatever else holds. Otherwise an
  entity that ends gets ``result`` SUCCESS iff its status is in
  :attr:`EntityKind.success` and none of its children ended outside the child
  kind's ``success`` (nor, when the child kind has ``exit_codes``, with an
  exit code other than 0); else CANCELLED if somebody asked it to end while
  it was live (a termination request: ``drover terminate``, or a handler's
  ``HandlerResult.terminate``, recorded in its ``data`` under
  :data:`STOP_REQUESTED`), a stop that is not a failure; FAILURE otherwise.
  ``result_from`` says which children count: all of them (``"children"``), only the latest child of
  each slot (``"latest-child"``: each retry is a new child, so earlier ones
  are superseded), or none (``"status"``). A live entity has no result.

No kind is declared here: drover's own (``session``/``kernel``,
``deployment``/``route``) are declared by the packages under
:mod:`drover.kinds`, which register them as any plugin registers its kinds.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from enum import StrEnum
from typing import Any

import attrs

from drover.model.budgets import BudgetUse
from drover.model.checks import is_kebab_case
from drover.model.deprecation import moved_names
from drover.model.errors import InvalidHandlerError
from drover.model.filters import slot_field
from drover.model.kind_parts import Budget, Limit, TerminationRule
from drover.model.pools import Pool, PoolHolders, collect_pools, in_family, is_family
from drover.model.values import Entity

__all__ = [
    "FAILED_BECAUSE",
    "RESULT_FROM",
    "STOP_REQUESTED",
    "Budget",
    "EntityKind",
    "Kinds",
    "Limit",
    "TerminationRule",
]

# drover's own kinds moved to their packages during 0.1: back here, deprecated, in 0.2.
__getattr__ = moved_names(
    __name__,
    {
        "SESSION": "drover.kinds.sessions.kinds",
        "KERNEL": "drover.kinds.sessions.kinds",
        "DEPLOYMENT": "drover.kinds.deployments.kinds",
        "ROUTE": "drover.kinds.deployments.kinds",
        "BUILTIN_KINDS": "drover.kinds.builtin",
    },
)


#: The ``data`` key a termination request writes (who asked: ``api`` or a handler's
#: name) on the entity it moves; an entity that ends without success after it gets
#: the result CANCELLED instead of FAILURE.
STOP_REQUESTED = "stop_requested_by"
#: The ``data`` key a handler's move for a fault (``MoveTo(fails=True)``) writes (its
#: ``status_info``, else the handler's name) on the entity it moves: the entity then ends
#: FAILURE whatever its children did, even if it was asked to stop.
FAILED_BECAUSE = "failed_because"


def _frozen_str(values: Iterable[str]) -> frozenset[str]:
    return frozenset(values)


def _maybe_frozen(values: Iterable[str] | None) -> frozenset[str] | None:
    return None if values is None else frozenset(values)


#: What an entity's ``result`` is derived from (:attr:`EntityKind.result_from`).
RESULT_FROM = ("children", "latest-child", "status")


def _budgets(values: Iterable[Budget]) -> tuple[Budget, ...]:
    return tuple(values)


def _rules(values: Iterable[TerminationRule]) -> tuple[TerminationRule, ...]:
    return tuple(values)


def _pools(values: Iterable[Pool]) -> tuple[Pool, ...]:
    return tuple(values)


def _limits(values: Iterable[Limit]) -> tuple[Limit, ...]:
    return tuple(values)


def _reported(values: Iterable[tuple[str, str]]) -> frozenset[tuple[str, str]]:
    return frozenset((str(a), str(b)) for a, b in values)


@attrs.frozen
class EntityKind:
    """One lifecycle: a name, its statuses, which are terminal, and its parent kind.

    Example::

        class JobStatus(StrEnum):
            QUEUED = "QUEUED"
            RUNNING = "RUNNING"
            DONE = "DONE"
            FAILED = "FAILED"

        register(EntityKind("job", JobStatus, terminal={JobStatus.DONE, JobStatus.FAILED}))

    ``success``: the terminal statuses that count as success (default: the
    first terminal status declared). ``exit_codes``: a child of this kind
    succeeded only with exit code 0 (kernels). ``budgets``: named failure
    budgets (:class:`Budget`). ``requeue_limit_status``: where an entity past
    its requeue budget goes (default: the last terminal status declared).
    ``termination``: how a termination request moves it (first matching rule
    wins; default: every live status to the last terminal status);
    ``terminable=False`` refuses termination requests (kernels end with their
    session).

    Creation (:func:`drover.model.creation.check_new_entities`): ``check_spec``
    refuses a new entity's spec with :class:`~drover.model.errors.InvalidSpecError`
    (called with the spec and where it is, say ``"kernel 2"``); ``created_in``
    are the statuses a new entity may start in (``None``: any; tests may seed
    others); ``resource_slots``, when set, says the spec's top-level numbers
    are resource slots some agent must offer, these ones always.
    """

    name: str
    statuses: type[StrEnum]
    terminal: frozenset[str] = attrs.field(converter=_frozen_str)
    parent: str | None = None
    success: frozenset[str] | None = attrs.field(default=None, converter=_maybe_frozen)
    exit_codes: bool = False
    budgets: tuple[Budget, ...] = attrs.field(default=(), converter=_budgets)
    requeue_limit_status: str | None = None
    termination: tuple[TerminationRule, ...] = attrs.field(default=(), converter=_rules)
    #: ``False``: entities of this kind end only with their parent (kernels).
    terminable: bool = True
    #: Statuses kept for compatibility that the lifecycle never uses (no graph warnings).
    dormant: frozenset[str] = attrs.field(factory=frozenset, converter=_frozen_str)
    #: Entities live until someone asks them to end (services): a termination
    #: request counts as a way out in the graph checks.
    ends_on_request: bool = False
    check_spec: Callable[[Mapping[str, Any], str], None] | None = None
    created_in: frozenset[str] | None = attrs.field(default=None, converter=_maybe_frozen)
    resource_slots: frozenset[str] | None = attrs.field(default=None, converter=_maybe_frozen)
    #: Which children an ended entity's result counts (one of :data:`RESULT_FROM`).
    result_from: str = "children"
    #: With ``result_from="latest-child"``: the children's spec key naming their slot
    #: (a replica number, say), or a tuple of keys for a composite slot (replica x job
    #: number); ``None``: all children are one slot.
    result_slot: str | tuple[str, ...] | None = attrs.field(default=None, converter=slot_field)
    #: Upper bounds of its counts (:class:`Limit`).
    limits: tuple[Limit, ...] = attrs.field(default=(), converter=_limits)
    #: The class its entities are read into: :class:`~drover.model.values.Entity`, or
    #: a kind's own spelling with the same attributes (sessions: ``SessionWithKernels``).
    value_type: type[Any] = Entity
    #: Pools of counter tokens its entities hold while in some statuses (:mod:`drover.model.pools`).
    pools: tuple[Pool, ...] = attrs.field(default=(), converter=_pools)
    #: Status changes that only pushed reports make (``Repository.report``: a backend or an
    #: outside system saying what happened), as ``(from, to)`` pairs: the graph checks
    #: (``drover plugins check``) count them as ways in and out, and ``drover graph`` draws
    #: them (handler ``report``). With :attr:`strict_reports` they are also the only moves
    #: into a live status an outside report may make.
    reported: frozenset[tuple[str, str]] = attrs.field(factory=frozenset, converter=_reported)
    #: How rows become ``value_type`` values when it is the kind's own class: called by
    #: storage with the entities' rows, their children's rows, the handler whose try
    #: count they carry and the tick's claim (the row layouts and the call are
    #: :class:`drover.storage.rows.Reader`'s). ``None``: storage reads :class:`Entity`.
    reader: Callable[..., list[Any]] | None = attrs.field(default=None, eq=False)
    #: The kind a handler or promotion rule that names no kind acts on (drover's sessions,
    #: as the design card's handlers do); at most one registered kind may say so.
    default: bool = False
    #: ``True``: a report from outside drover (``Repository.report``, ``drover report``,
    #: ``POST /api/report``) may move an entity of this kind into a live status only along
    #: a :attr:`reported` pair, so no report leaves it where nothing resolves it; ending it
    #: is always allowed. A live status no pair enters is refused (InvalidSpecError); one
    #: entered only from other statuses makes the report not apply, as a compare-and-set.
    #: A backend's own kernel reports are not outside reports. ``False`` (the default):
    #: any status of the kind.
    strict_reports: bool = False

    def __attrs_post_init__(self) -> None:
        if not is_kebab_case(self.name):
            raise InvalidHandlerError(f"kind name {self.name!r} must be kebab-case")
        names = self.status_names
        if not names:
            raise InvalidHandlerError(f"kind {self.name!r}: its status enum has no members")
        for status in names:
            if len(status) > 32:
                raise InvalidHandlerError(
                    f"kind {self.name!r}: status {status!r} is longer than 32 characters"
                )
        if not self.terminal:
            raise InvalidHandlerError(f"kind {self.name!r}: declare at least one terminal status")
        self._known(self.terminal, "terminal")
        if self.success is not None:
            self._known(self.success, "success")
        if self.requeue_limit_status is not None:
            self._known({self.requeue_limit_status}, "requeue_limit_status")
        if self.created_in is not None:
            self._known(self.created_in, "created_in")
        for rule in self.termination:
            self._known({rule.to}, "termination")
            if rule.from_statuses is not None:
                self._known(rule.from_statuses, "termination")
            if rule.if_childless is not None:
                self._known({rule.if_childless}, "termination")
            if rule.mode is not None and not is_kebab_case(rule.mode):
                raise InvalidHandlerError(
                    f"kind {self.name!r}: termination mode {rule.mode!r} must be kebab-case"
                )
        if self.result_from not in RESULT_FROM:
            raise InvalidHandlerError(
                f"kind {self.name!r}: result_from {self.result_from!r} is not one of "
                f"{list(RESULT_FROM)}"
            )
        if self.result_slot is not None and self.result_from != "latest-child":
            raise InvalidHandlerError(
                f"kind {self.name!r}: result_slot is set, but result_from is "
                f"{self.result_from!r}, not 'latest-child'"
            )
        seen: set[str] = set()
        for budget in self.budgets:
            if budget.name in seen:
                raise InvalidHandlerError(f"kind {self.name!r}: budget {budget.name!r} twice")
            seen.add(budget.name)
            if budget.give_up is not None and budget.give_up.to is not None:
                self._known({budget.give_up.to}, f"budget {budget.name!r} give_up")
            if budget.resets_on:
                self._known(budget.resets_on, f"budget {budget.name!r} resets_on")
                if budget.resets:
                    raise InvalidHandlerError(
                        f"kind {self.name!r}: budget {budget.name!r} has resets=True and "
                        "resets_on: resets already refills it on every status change"
                    )
            if budget.limit is not None and (
                not isinstance(budget.limit, int) or isinstance(budget.limit, bool)
            ):
                raise InvalidHandlerError(
                    f"kind {self.name!r}: budget {budget.name!r} limit must be a whole number "
                    f"or None (no limit), not {budget.limit!r}"
                )
        for source, target in sorted(self.reported):
            self._known({source, target}, "reported")
            if source == target:
                raise InvalidHandlerError(
                    f"kind {self.name!r}: reported ({source}, {target}) does not change the status"
                )
        pools: set[str] = set()
        for pool in self.pools:
            if pool.name in pools:
                raise InvalidHandlerError(f"kind {self.name!r}: pool {pool.name!r} twice")
            pools.add(pool.name)
            self._known(pool.held_in, f"pool {pool.name!r} held_in")
            ended = sorted(pool.held_in & self.terminal)
            if ended:
                raise InvalidHandlerError(
                    f"kind {self.name!r}: pool {pool.name!r} is held in terminal status(es) "
                    f"{ended}: an ended entity would hold its token forever"
                )

    def _known(self, statuses: Iterable[str], what: str) -> None:
        unknown = sorted(set(statuses) - set(self.status_names))
        if unknown:
            raise InvalidHandlerError(
                f"kind {self.name!r}: {what} names unknown status(es) {unknown}; "
                f"its statuses are {list(self.status_names)}"
            )

    @functools.cached_property
    def status_names(self) -> tuple[str, ...]:
        """Every status, in lifecycle (declaration) order (computed once: it is asked for
        per entity created and per row read)."""
        return tuple(s.value for s in self.statuses)

    def status(self, value: str) -> StrEnum:
        """The enum member for ``value``."""
        return self.statuses(value)

    def reported_from(self, to: str) -> frozenset[str]:
        """The statuses a declared :attr:`reported` pair moves to ``to`` from."""
        return frozenset(source for source, target in self.reported if target == to)

    def takes_report(self, status: str, to: str) -> bool:
        """Whether a report from outside drover may move an entity of this kind from
        ``status`` to ``to`` (see :attr:`strict_reports`)."""
        return not self.strict_reports or to in self.terminal or status in self.reported_from(to)

    def report_refusal(self, entity_id: str, to: str) -> str | None:
        """Why no outside report may move ``entity_id`` (of this kind) to ``to``, or
        ``None`` when one may (see :attr:`strict_reports`)."""
        if not self.strict_reports or to in self.terminal or self.reported_from(to):
            return None
        entered = [s for s in self.status_names if s not in self.terminal and self.reported_from(s)]
        ends = ", ".join(s for s in self.status_names if s in self.terminal)
        may = f"move it to {', '.join(entered)}, or" if entered else "only"
        return (
            f"{entity_id} is a {self.name}: a report may not move it to {to}; reports may {may} "
            f"end it ({ends}): drover moves it to the others"
        )

    @property
    def first_status(self) -> str:
        """Where new entities start unless told otherwise."""
        return self.status_names[0]

    @functools.cached_property
    def live(self) -> frozenset[str]:
        """The non-terminal statuses."""
        return frozenset(s for s in self.status_names if s not in self.terminal)

    @property
    def success_statuses(self) -> frozenset[str]:
        """The terminal statuses that count as success."""
        if self.success is not None:
            return self.success
        return frozenset({next(s for s in self.status_names if s in self.terminal)})

    @property
    def limit_status(self) -> str:
        """Where an entity past its requeue budget goes."""
        if self.requeue_limit_status is not None:
            return self.requeue_limit_status
        return [s for s in self.status_names if s in self.terminal][-1]

    def rank(self, status: str) -> int:
        """Lifecycle rank: declaration order, terminal statuses sharing the last rank."""
        names = self.status_names
        if status in self.terminal:
            return len(names)
        return names.index(status)

    def is_requeue(self, from_status: str, to_status: str) -> bool:
        """Whether ``from_status`` -> ``to_status`` sends an entity back in its lifecycle."""
        return to_status not in self.terminal and self.rank(to_status) < self.rank(from_status)

    def movable_to(self, target: str) -> frozenset[str]:
        """The statuses a transition of children to ``target`` may move.

        Terminal children never move. A move to the first status (starting
        over) moves every other live child; any other move only children
        *behind* ``target``, so progress reported first is never lost.
        """
        live = self.live
        if target in self.terminal:
            return live
        if target == self.first_status:
            return live - {target}
        rank = self.rank(target)
        return frozenset(s for s in live if self.rank(s) < rank)

    def end_status_for(self, parent_status: str) -> str:
        """What a live child of this kind becomes when its parent ends in ``parent_status``."""
        if parent_status in self.terminal:
            return parent_status
        ends = [s for s in self.status_names if s in self.terminal]
        unsuccessful = [s for s in ends if s not in self.success_statuses]
        return (unsuccessful or ends)[0]

    @property
    def termination_modes(self) -> frozenset[str]:
        """The named termination modes this kind's rules serve (besides the plain one)."""
        return frozenset(r.mode for r in self.termination if r.mode is not None)

    def termination_of(
        self, status: str, has_children: bool, mode: str | None = None
    ) -> TerminationRule | None:
        """The rule for a termination request (in ``mode``; ``None``: a plain one) in
        ``status``; ``None``: nothing to do."""
        if status in self.terminal or not self.terminable:
            return None
        rules: Iterable[TerminationRule] = [r for r in self.termination if r.mode == mode]
        if not rules and mode is None:
            rules = (TerminationRule(self.limit_status),)
        for rule in rules:
            if status == rule.to:
                continue
            if rule.from_statuses is None or status in rule.from_statuses:
                if not has_children and rule.if_childless is not None:
                    return attrs.evolve(rule, to=rule.if_childless)
                return rule
        return None


class Kinds(Mapping[str, EntityKind]):
    """The registered kinds by name, checked as a set (parents known, one child kind each).

    There is no default set: drover's own kinds (``drover.kinds``) are
    registered by plugins like anyone's, and whoever assembles a system
    (:class:`drover.app.App`) collects them from the plugin manager.
    """

    def __init__(
        self,
        kinds: Iterable[EntityKind],
        *,
        budgets: Mapping[str, Mapping[str, int]] | None = None,
        pools: Mapping[str, int] | None = None,
    ) -> None:
        self._kinds: dict[str, EntityKind] = {}
        for kind in kinds:
            if kind.name in self._kinds and self._kinds[kind.name] is not kind:
                raise InvalidHandlerError(f"kind {kind.name!r} is registered twice")
            self._kinds[kind.name] = kind
        defaults = sorted(k.name for k in self._kinds.values() if k.default)
        if len(defaults) > 1:
            raise InvalidHandlerError(
                f"kinds {defaults} each say they are the default kind; at most one may"
            )
        #: The kind handlers and promotion rules that name none act on (``None``: none is).
        self.default: str | None = defaults[0] if defaults else None
        self._children: dict[str, EntityKind] = {}
        for kind in self._kinds.values():
            if kind.parent is None:
                continue
            if kind.parent not in self._kinds:
                raise InvalidHandlerError(
                    f"kind {kind.name!r} names parent kind {kind.parent!r}, which is not "
                    f"registered; registered: {sorted(self._kinds)}"
                )
            if kind.parent in self._children:
                other = self._children[kind.parent].name
                raise InvalidHandlerError(
                    f"kind {kind.parent!r} would have two child kinds ({other!r} and "
                    f"{kind.name!r}); a kind has at most one (link other kinds with relations)"
                )
            self._children[kind.parent] = kind
        # Statuses are read as each kind's own enum members (a dict lookup per row).
        self._members: dict[str, dict[str, StrEnum]] = {
            kind.name: {s.value: s for s in kind.statuses} for kind in self._kinds.values()
        }
        self._budgets = {k: dict(v) for k, v in (budgets or {}).items()}
        for kind_name, limits in self._budgets.items():
            declared = {b.name for b in self[kind_name].budgets}
            unknown = sorted(set(limits) - declared)
            if unknown:
                raise InvalidHandlerError(
                    f"budgets of kind {kind_name!r}: unknown budget(s) {unknown}; "
                    f"declared: {sorted(declared)}"
                )
        self._pool_capacities = dict(pools or {})
        pairs = ((kind.name, pool) for kind in self._kinds.values() for pool in kind.pools)
        self._pools = collect_pools(pairs, self._pool_capacities)
        # A move of (kind, from, to) -> the pools it enters; memoised (few distinct moves).
        self._entered: dict[tuple[str, str, str], tuple[PoolHolders, ...]] = {}
        # Members of pool families met so far, by name (memoised: one per worker, say).
        self._family_members: dict[str, PoolHolders] = {}

    def configured(
        self,
        budgets: Mapping[str, Mapping[str, int]] | None = None,
        pools: Mapping[str, int] | None = None,
    ) -> Kinds:
        """These kinds with configured budget limits (``[budgets.<kind>]``) and pool
        capacities (``[pools]``) on top."""
        if not budgets and not pools:
            return self
        merged = {k: dict(v) for k, v in self._budgets.items()}
        for kind_name, limits in (budgets or {}).items():
            merged.setdefault(kind_name, {}).update(limits)
        capacities = {**self._pool_capacities, **(pools or {})}
        return Kinds(self._kinds.values(), budgets=merged, pools=capacities)

    @property
    def pools(self) -> Mapping[str, PoolHolders]:
        """Every pool some kind declares, by name, with its (configured) capacity; a pool
        family (``gpu-node-*``) is one entry, its members are not (:meth:`pool`)."""
        return self._pools

    def pool(self, name: str) -> PoolHolders | None:
        """Pool ``name``: one the kinds declare, or a member of a family they declare
        (``gpu-node-n7`` of ``gpu-node-*``, with the family's holders and its capacity
        unless one is configured for the member); ``None`` for neither."""
        found = self._pools.get(name) or self._family_members.get(name)
        if found is not None or not self._pools:
            return found
        family = next(
            (p for n, p in self._pools.items() if is_family(n) and in_family(n, name)), None
        )
        if family is None:
            return None
        if len(self._family_members) >= 4096:
            self._family_members.clear()  # bounded: names come from entities' claims
        capacity = self._pool_capacities.get(name, family.capacity)
        found = attrs.evolve(family, name=name, capacity=capacity, family=family.name)
        self._family_members[name] = found
        return found

    def pools_entered(self, kind: str, from_status: str, to_status: str) -> tuple[PoolHolders, ...]:
        """The pools an entity of ``kind`` starts to hold by moving between the statuses."""
        if not self._pools:
            return ()
        key = (kind, str(from_status), str(to_status))
        found = self._entered.get(key)
        if found is None:
            found = self._entered[key] = tuple(
                pool
                for pool in self._pools.values()
                if pool.held_by(kind, key[2]) and not pool.held_by(kind, key[1])
            )
        return found

    def budget_limit(self, kind: str, spec: Mapping[str, Any], budget: str) -> int | None:
        """A named budget's limit: ``spec["budgets"]``, else configuration, else the kind's."""
        per_entity = spec.get("budgets")
        if isinstance(per_entity, dict) and budget in per_entity:
            value = per_entity[budget]
            return value if isinstance(value, int) and not isinstance(value, bool) else None
        configured = self._budgets.get(kind, {})
        if budget in configured:
            return configured[budget]
        for declared in self[kind].budgets:
            if declared.name == budget:
                return declared.limit
        return None

    def budget_uses(
        self, kind: str, spec: Mapping[str, Any], spent: Mapping[str, int] | None
    ) -> dict[str, BudgetUse] | None:
        """Every budget ``kind`` declares, used and limit (``None``: it declares none)."""
        found = self._kinds.get(kind)
        if found is None or not found.budgets:
            return None
        used = spent or {}
        return {
            b.name: BudgetUse(used.get(b.name, 0), self.budget_limit(kind, spec, b.name))
            for b in found.budgets
        }

    def members(self, name: str) -> Mapping[str, StrEnum]:
        """``status value -> enum member`` of kind ``name`` (empty for an unknown kind)."""
        return self._members.get(name, {})

    def status(self, kind: str, value: str) -> StrEnum | str:
        """``value`` as a member of ``kind``'s status enum (unknown ones stay as they are)."""
        return self._members.get(kind, {}).get(value, value)

    def __getitem__(self, name: str) -> EntityKind:
        try:
            return self._kinds[name]
        except KeyError:
            raise InvalidHandlerError(
                f"no kind named {name!r} is registered; registered: {sorted(self._kinds)}"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._kinds)

    def __len__(self) -> int:
        return len(self._kinds)

    def child_of(self, name: str) -> EntityKind | None:
        """The kind whose entities are children of ``name``'s, if any."""
        return self._children.get(name)

    def with_limits(self, bounds: Mapping[str, int]) -> Kinds:
        """These kinds with the configured ``bounds`` (limit name -> bound) in their limits."""
        kinds = [
            attrs.evolve(
                kind,
                limits=[
                    attrs.evolve(lim, bound=bounds.get(lim.name, lim.bound)) for lim in kind.limits
                ],
            )
            if kind.limits
            else kind
            for kind in self._kinds.values()
        ]
        return Kinds(kinds, budgets=self._budgets, pools=self._pool_capacities)
