"""Frozen value types shared by handlers, the coordinator and storage."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar, Protocol

import attrs

from drover.model.budgets import BudgetUse
from drover.model.deprecation import moved_names, warn_kindless
from drover.model.ids import new_id
from drover.model.outcomes import TargetOutcomes
from drover.model.status import SchedulingResult

__all__ = [
    "Child",
    "Claim",
    "CoordinatorInfo",
    "Entity",
    "HandlerOptions",
    "HandlerResult",
    "HistoryRecord",
    "KernelHistoryRecord",
    "MoveTo",
    "NewEntity",
    "Report",
    "StatusInfoRule",
    "StatusTransitions",
    "Target",
    "TerminationOutcome",
    "Transition",
]

# The session kind's values moved to its package (0.2).
__getattr__ = moved_names(
    __name__,
    {
        name: "drover.kinds.sessions.values"
        for name in ("KernelInfo", "KernelReport", "SessionWithKernels", "TransitionStatus")
    },
)


class Child(Protocol):
    """What the coordinator reads of a target's children (kernels, tasks...)."""

    @property
    def id(self) -> str:
        """The child's id."""
        ...

    @property
    def status(self) -> str:
        """Its status (a member of its kind's ``StrEnum``)."""
        ...


class Target(Protocol):
    """What the coordinator reads of every target, whatever its kind's value type.

    :class:`Entity` and :class:`SessionWithKernels` both have it; ``status``
    is a member of the kind's own status enum.
    """

    @property
    def id(self) -> str:
        """The entity's id."""
        ...

    @property
    def kind(self) -> str:
        """The kind's name."""
        ...

    @property
    def status(self) -> str:
        """The current status (a member of the kind's ``StrEnum``)."""
        ...

    @property
    def status_changed_at(self) -> datetime:
        """When it entered its status."""
        ...

    @property
    def try_count(self) -> int:
        """The running handler's tries in this status."""
        ...

    @property
    def spec(self) -> dict[str, Any]:
        """Desired state (read-only)."""
        ...

    @property
    def requeues(self) -> int:
        """Times it was sent back in its lifecycle."""
        ...

    @property
    def budgets(self) -> dict[str, BudgetUse] | None:
        """Its kind's named budgets, used and limit (``None``: the kind declares none)."""
        ...

    @property
    def children(self) -> Sequence[Child]:
        """Its children, in creation order."""
        ...


def _str_list(value: Any) -> list[str]:
    return [str(v) for v in value]


def _str_map(value: Mapping[str, str] | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in (value or {}).items()}


@attrs.frozen
class Transition:
    """Target statuses for one outcome, for any kind.

    ``to`` is the entity's new status and ``children`` its children's;
    ``None`` on a side keeps that side's status. ``children_info`` is the
    ``status_info`` of every child (and descendant) the transition moves or ends;
    ``status_info`` the entity's own when the transition moves it (a handler's
    own words for a target, ``HandlerResult(status_infos={id: …})``, come first).
    Example: experimaestro's jobs out of time, from their budget's ``give_up``::

        Budget("submissions", 3, give_up=Transition(JobState.ERROR, status_info="TIMEOUT"))
    """

    to: str | None = None
    children: str | None = None
    children_info: str | None = None
    status_info: str | None = None

    #: What the two sides are called in messages (a kind's spelling may name them).
    sides: ClassVar[tuple[str, str]] = ("to", "children")


def _outcomes(value: Mapping[str, Transition] | None) -> dict[str, Transition]:
    return dict(value or {})


@attrs.frozen
class StatusTransitions:
    """A lifecycle handler's transitions per outcome. ``None`` keeps both statuses.

    ``outcomes`` declares named outcomes besides the four classes, say
    ``{"stale": Transition(to=RouteStatus.TERMINATING)}``; a handler reports
    them with ``HandlerResult(outcomes={entity_id: "stale"})`` and history
    records the outcome's name as the result.
    """

    success: Transition | None = None
    need_retry: Transition | None = None
    expired: Transition | None = None
    give_up: Transition | None = None
    outcomes: dict[str, Transition] = attrs.field(factory=dict, converter=_outcomes)

    def for_result(self, result: SchedulingResult | str) -> Transition | None:
        """Return the transition declared for ``result`` (SKIPPED never transitions)."""
        classes: dict[str, Transition | None] = {
            SchedulingResult.SUCCESS: self.success,
            SchedulingResult.NEED_RETRY: self.need_retry,
            SchedulingResult.EXPIRED: self.expired,
            SchedulingResult.GIVE_UP: self.give_up,
        }
        found = classes.get(result)
        if found is None and result in self.outcomes:
            return self.outcomes[result]
        return found


def _mappings(value: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    return tuple(value)


def _pairs(value: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple((str(a), str(b)) for a, b in value)


@attrs.frozen
class NewEntity:
    """An entity a handler asks to create, in the same transaction as its tick's outcome.

    ``by`` is the target whose outcome the creation belongs to (default:
    ``parent_id``): if that target's compare-and-set fails, nothing is
    created. ``status`` defaults to the kind's first status. ``children`` are
    mappings with optional ``kind`` (default: the kind's child kind),
    ``status`` and ``spec``. ``links`` are ``(relation, target_id)`` pairs,
    say ``("depends_on", other_id)``. ``id`` is chosen up front so the
    handler can refer to it (in a data patch, say).
    """

    kind: str
    spec: dict[str, Any] = attrs.field(factory=dict)
    parent_id: str | None = None
    status: str | None = None
    by: str | None = None
    name: str | None = None
    priority: int = 0
    children: tuple[Mapping[str, Any], ...] = attrs.field(default=(), converter=_mappings)
    links: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_pairs)
    id: str = attrs.field(factory=new_id)

    @property
    def creator(self) -> str | None:
        """The target whose applied outcome this creation depends on."""
        return self.by if self.by is not None else self.parent_id


def _new_entities(value: Iterable[NewEntity]) -> list[NewEntity]:
    return list(value)


def _patches(value: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {str(k): v for k, v in value.items()}


def _claims(value: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    return {str(k): dict(v) for k, v in value.items()}


@attrs.frozen
class MoveTo:
    """One targeted move of :attr:`HandlerResult.moves`: from ``expected`` (compare-and-set)
    to ``to``, with the ``status_info`` the moved entity gets (``None``: it keeps its own).

    ``fails``: the move is for a fault (a replica evicted for failing its health
    checks): the entity ends with result FAILURE whatever its children do, even
    if it is later asked to stop (its ``data`` records why under
    :data:`drover.model.kinds.FAILED_BECAUSE`).

    A plain ``(expected, to)`` or ``(expected, to, status_info)`` tuple converts to one.
    """

    expected: str = attrs.field(converter=str)
    to: str = attrs.field(converter=str)
    status_info: str | None = attrs.field(default=None, converter=attrs.converters.optional(str))
    fails: bool = False


def _moves(value: Mapping[str, Any]) -> dict[str, MoveTo]:
    moves: dict[str, MoveTo] = {}
    for key, move in value.items():
        if isinstance(move, MoveTo):
            moves[str(key)] = move
        elif isinstance(move, tuple | list) and len(move) in (2, 3):
            moves[str(key)] = MoveTo(*move)
        else:
            raise TypeError(
                f"moves[{key!r}] must be (expected_status, new_status[, status_info]) "
                f"or a MoveTo, got {move!r}"
            )
    return moves


def _terminations(value: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
    return {str(k): [str(i) for i in v] for k, v in value.items()}


@attrs.frozen
class HandlerResult:
    """What a handler says about the entities (sessions) it was given.

    ``successes``, ``failures`` and ``skipped`` hold entity ids. ``messages``
    and ``error_codes`` map an id to the reason, which the coordinator
    copies into the history row. ``status_infos`` maps an id to the
    ``status_info`` it gets *if* this tick changes its status (say
    ``MAX_DURATION_EXCEEDED``). ``placements`` maps a kernel id to the agent
    it was placed on: written in the same transaction as the outcome, and
    only for sessions whose outcome was applied (a scheduler's decisions).

    ``outcomes`` reports named outcomes (declared in
    ``StatusTransitions.outcomes``); ``budgets`` names the kind's budget a
    failure charges instead of the handler's tries, or a named outcome
    charges (past its limit, the outcome becomes GIVE_UP); ``create`` lists
    :class:`NewEntity` values inserted with their creator's outcome; ``data``
    merge-patches (RFC 7396) targets' handler-owned ``data``; ``terminate``
    maps a target to other entities (any kind) to ask to end, by their kinds'
    termination rules, as ``drover terminate`` would (recorded under the
    handler's name, with ``status_info`` ``REQUESTED_BY_<HANDLER>``). All of
    them are written only for targets whose compare-and-set holds, in the
    same transaction as the outcome: a handler changes the world only
    through its result.
    """

    successes: list[str] = attrs.field(factory=list, converter=_str_list)
    failures: list[str] = attrs.field(factory=list, converter=_str_list)
    skipped: list[str] = attrs.field(factory=list, converter=_str_list)
    messages: dict[str, str] = attrs.field(factory=dict, converter=_str_map)
    error_codes: dict[str, str] = attrs.field(factory=dict, converter=_str_map)
    status_infos: dict[str, str] = attrs.field(factory=dict, converter=_str_map)
    placements: dict[str, str] = attrs.field(factory=dict, converter=_str_map)
    outcomes: dict[str, str] = attrs.field(factory=dict, converter=_str_map)
    budgets: dict[str, str] = attrs.field(factory=dict, converter=_str_map)
    create: list[NewEntity] = attrs.field(factory=list, converter=_new_entities)
    data: dict[str, dict[str, Any]] = attrs.field(factory=dict, converter=_patches)
    terminate: dict[str, list[str]] = attrs.field(factory=dict, converter=_terminations)
    #: ``entity_id -> (expected_status, new_status[, status_info])`` (or a :class:`MoveTo`):
    #: entities other than the targets (any kind) to move in the tick's transaction, each
    #: with compare-and-set; read back as :class:`MoveTo` values.
    moves: dict[str, MoveTo] = attrs.field(factory=dict, converter=_moves)
    #: ``entity_id -> "SUCCESS" | "FAILURE"``: the target's result, when this tick
    #: leaves it in a terminal status (instead of the kind's ``result_from`` rule).
    results: dict[str, str] = attrs.field(factory=dict, converter=_str_map)
    #: ``entity_id -> {pool name: units}``: the target's claims on its kind's ``claimed``
    #: pools for this tick's move, decided by the handler (the worker it chose, say). The
    #: apply counts them against the pools under the pools' locks and, if admitted, writes
    #: them as the entity's ``spec["pools"]`` (replacing its earlier claims), in the same
    #: transaction: two coordinators never both fill the same pool's last token.
    claims: dict[str, dict[str, int]] = attrs.field(factory=dict, converter=_claims)

    def per_target(self) -> TargetOutcomes:
        """This result as one :class:`~drover.model.outcomes.TargetOutcome` per entity id.

        Every collection above, normalised: each id's outcome class (success,
        failure, skipped, a named outcome, or none) with its message, error
        code, ``status_info``, budget, data patch, terminations, result, claims
        and creations, plus what contradicts itself
        (:meth:`~drover.model.outcomes.TargetOutcomes.problem`: an id listed
        twice, data for an id without an outcome...). It reads the result as
        it stands, on each call: handlers often fill the lists and maps after
        constructing the result. The coordinator reads it once per tick, when
        ``execute()`` has returned.
        """
        return TargetOutcomes.read(self)


@attrs.frozen
class HandlerOptions:
    """How the coordinator judges a handler's outcomes.

    ``max_retries``: consecutive failures allowed before GIVE_UP (``None``: no limit).
    ``timeout``: seconds a session may stay in a status this handler owns before
    EXPIRED (``None``: never). ``batch_size``: sessions fetched per tick.
    ``order``: which come first when more wait than ``batch_size``:
    ``"priority"`` (highest priority, then oldest) or ``"oldest-seen"`` (the
    ones this handler fetched least recently, never-fetched first, so a
    handler polling every live entity reaches all of them in turn).
    """

    max_retries: int | None = 5
    timeout: float | None = None
    batch_size: int = 1000
    order: str = "priority"


@attrs.frozen
class StatusInfoRule:
    """How a promotion handler sets ``status_info`` on the sessions it promotes.

    The first ``(kernel_statuses, text)`` pair for which any kernel of the
    session is in ``kernel_statuses`` wins; otherwise ``default`` is used.
    """

    default: str | None = None
    if_any_kernel: tuple[tuple[frozenset[str], str], ...] = ()


@attrs.frozen
class Claim:
    """A tick's claim on the entities it fetched (PostgreSQL; ignored on SQLite).

    ``owner`` is the coordinator's id, ``token`` is new for every tick (the
    fencing token the apply's compare-and-set checks) and ``expires`` is when
    other coordinators may take the entities over (epoch seconds). ``ttl``:
    how long the claim lasts from a renewal (a backend renews the claim on a
    session it is still working on; ``None``: never renewed).

    ``solo``: the claim is the coordinator's solo lease (it runs alone): ``token``
    is the lease's, no row carries it, and the tick holds an entity as long as
    the lease holds and no other coordinator claimed the entity.
    """

    owner: str
    token: str
    expires: float
    ttl: float | None = None
    solo: bool = False


@attrs.frozen
class Entity:
    """One entity of any kind, as a handler of that kind sees it.

    The session kind's handlers get :class:`SessionWithKernels`, which has
    the same attributes. ``try_count`` is the running handler's tries in the
    current status; ``tries`` every handler's; ``budgets`` every named budget
    its kind declares, with how much is used and its limit
    (:class:`~drover.model.budgets.BudgetUse`; ``None`` if it declares none).
    ``children`` are the entity's children (of its kind's child kind).
    ``links`` are its relations to other entities, ``(relation, target_id)``
    pairs sorted by relation then target (as ``NewEntity.links`` spells them).
    """

    id: str
    kind: str
    status: str
    status_changed_at: datetime
    try_count: int
    priority: int
    created_at: datetime
    spec: dict[str, Any]
    data: dict[str, Any] | None
    status_info: str | None
    result: str | None
    parent_id: str | None = None
    children: tuple[Entity, ...] = ()
    name: str | None = None
    tries: dict[str, int] = attrs.field(factory=dict)
    requeues: int = 0
    budgets: dict[str, BudgetUse] | None = None
    exit_code: int | None = None
    links: tuple[tuple[str, str], ...] = ()
    #: The claim of the tick this value was fetched for, as on :class:`SessionWithKernels`.
    claim: Claim | None = attrs.field(default=None, eq=False, repr=False)

    def linked(self, relation: str) -> tuple[str, ...]:
        """The ids this entity links to with ``relation``."""
        return tuple(target for name, target in self.links if name == relation)


@attrs.frozen
class HistoryRecord:
    """One row of ``scheduling_history``."""

    id: int
    session_id: str
    handler: str
    #: A :class:`SchedulingResult`, a named outcome's name, or ``CREATED``.
    result: SchedulingResult | str
    #: Statuses of the entity's kind (members of its status enum).
    from_status: str
    to_status: str
    error_code: str | None
    message: str | None
    attempts: int
    created_at: datetime
    updated_at: datetime
    kind: str = attrs.field(default="", kw_only=True)

    def __attrs_post_init__(self) -> None:
        if not self.kind:
            warn_kindless(self)

    @property
    def entity_id(self) -> str:
        """The entity the row is about (``session_id`` is the session kind's spelling)."""
        return self.session_id


@attrs.frozen
class KernelHistoryRecord:
    """One status change of a child entity (a kernel): moved by its parent's transition,
    by a handler of its own kind, or reported by a backend (source ``backend``).

    ``kernel_id``/``session_id`` are the child's and its parent's ids; statuses
    are :class:`KernelStatus` members for kernels, the child kind's strings
    otherwise.
    """

    id: int
    kernel_id: str
    session_id: str
    source: str
    from_status: str
    to_status: str
    message: str | None
    created_at: datetime


@attrs.frozen
class Report:
    """An outside event's news about one entity of any kind (a worker's heartbeat, a
    webhook, an agent, a backend's kernel report).

    It moves the entity to ``status`` only if it is not ended and (when
    ``expected`` is given) is in one of ``expected``: compare-and-set. A report
    of the status the entity already has changes nothing but ``data``.
    ``status_info`` replaces the entity's when given; ``data`` is a merge-patch
    of its handler-owned data (RFC 7396). ``exit_code`` and ``runtime`` are a
    backend's bookkeeping (kernels).
    """

    entity_id: str
    status: str
    #: A frozenset (no conversion: a backend reports thousands of these at once).
    expected: frozenset[str] | None = None
    status_info: str | None = None
    data: dict[str, Any] | None = None
    message: str | None = None
    exit_code: int | None = None
    runtime: dict[str, Any] | None = None


@attrs.frozen
class CoordinatorInfo:
    """One coordinator process, as its heartbeat row records it."""

    id: str
    host: str
    pid: int
    started_at: datetime
    heartbeat_at: datetime
    version: str
    stopped_at: datetime | None
    #: The handlers this coordinator runs (loaded and enabled), by name; ``None``: not
    #: recorded (a coordinator of a drover before they were).
    handlers: tuple[str, ...] | None = None


@attrs.frozen
class TerminationOutcome:
    """What a termination request did to one session."""

    session_id: str
    from_status: str
    to_status: str
    changed: bool
    kind: str = attrs.field(default="", kw_only=True)

    def __attrs_post_init__(self) -> None:
        if not self.kind:
            warn_kindless(self)
