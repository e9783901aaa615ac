"""Which handlers a status change wakes: the daemon's wake-up rules.

Derived from the kinds (their parent relations) and each handler's targets
and fetch filters, never from kind names:

* **Entry.** An entity entering ``(kind, status)`` wakes the handlers that
  target it, except those that *wait for age*: a handler whose fetch filters
  require, in every case, a :class:`~drover.model.filters.StatusAge` of
  ``seconds > 0`` cannot match an entity that has just entered its status
  (entering resets the age), so entries never wake it.
* **Ends.** An entity of a kind ending wakes the handlers of that kind's
  first status (what ended freed what it held, an agent's capacity say),
  except the age-waiting ones: a watchdog over every live status is then
  ticked by its interval only, not by each end of its kind.
* **Children.** A child entering a status wakes its parent kind's handlers
  whose filters read children (:class:`~drover.model.filters.Children`,
  :class:`~drover.model.filters.ChildCount`, the child-status filter) and
  could newly hold after that entry; and the promotion rules of the parent
  kind that could newly match. ``Children(S, ALL | ANY)`` and a rule
  matching ``ALL`` or ``ANY`` of ``S`` can only newly hold when a child
  enters a status in ``S``; a rule matching ``NOT_ANY`` of ``S``, when one
  enters a status outside ``S``; the filters ``NOT_ANY`` and ``ChildCount``
  on any child move.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from drover.coordinator.handlers import fetch_filters, handler_name, target_statuses
from drover.model.filters import AllOf, AnyOf, CandidateFilter, ChildCount, Children, StatusAge
from drover.model.kinds import Kinds
from drover.model.plan import AppliedChange
from drover.model.promotion import PromotionRule
from drover.model.rules import MATCH_CONDITIONS
from drover.model.status import KernelMatchType, SchedulingResult

__all__ = ["WakeRules", "child_statuses_read", "promotion_child_statuses", "waits_for_age"]

#: Marker: a filter that may newly hold whatever status a child enters.
_ANY_STATUS = "*"


def waits_for_age(filters: Iterable[CandidateFilter]) -> bool:
    """Whether ``filters`` (all must hold) require a status age of more than zero seconds.

    Only a top-level :class:`StatusAge` with ``seconds`` (or one inside a
    top-level :class:`AllOf`) counts: a deadline read from ``spec``/``data``
    may be zero, and an :class:`AnyOf` may hold through another branch.
    """
    for f in filters:
        if isinstance(f, StatusAge) and f.seconds is not None and f.seconds > 0:
            return True
        if isinstance(f, AllOf) and waits_for_age(f.filters):
            return True
    return False


def child_statuses_read(filters: Iterable[CandidateFilter]) -> frozenset[str]:
    """The child statuses whose entry may make ``filters`` newly hold (``"*"``: any)."""
    found: set[str] = set()
    for f in filters:
        if isinstance(f, Children):
            if f.match in (KernelMatchType.ALL, KernelMatchType.ANY):
                found |= {str(s) for s in f.statuses}
            else:
                found.add(_ANY_STATUS)
        elif isinstance(f, ChildCount):
            found.add(_ANY_STATUS)
        elif isinstance(f, AnyOf | AllOf):
            found |= child_statuses_read(f.filters)
    return frozenset(found)


def promotion_child_statuses(rule: PromotionRule, child_statuses: Iterable[str]) -> frozenset[str]:
    """The child statuses whose entry may make ``rule`` newly match: its checked statuses
    for ``ANY`` and ``ALL``; for ``NOT_ANY``, every other status (a child leaving them)."""
    checked = frozenset(str(s) for s in rule.kernel_statuses)
    condition = MATCH_CONDITIONS[rule.match]
    found: set[str] = set()
    if condition.some_in or condition.none_outside:
        found |= checked
    if condition.none_in:
        found |= {str(s) for s in child_statuses} - checked
    return frozenset(found)


@attrs.frozen
class WakeRules:
    """The wake-ups of a set of handlers, by ``(kind, status)`` entered.

    ``targets``: every handler targeting the status; ``entry``: those woken
    when an entity enters it (``targets`` minus the age-waiting ones);
    ``children``: by ``(child kind, status)``, the parent kind's handlers
    that read children; ``first``: by kind, the handlers its first status's
    entry wakes (woken when an entity of the kind ends);
    ``terminal`` and ``first_status``: each kind's; ``statuses_of``: by
    handler, the ``(kind, status)`` pairs it targets; ``promotions_beside``:
    by lifecycle handler, the promotion rules sharing one of its statuses.
    """

    targets: Mapping[tuple[str, str], frozenset[str]]
    entry: Mapping[tuple[str, str], frozenset[str]]
    children: Mapping[tuple[str, str], frozenset[str]]
    first: Mapping[str, frozenset[str]]
    terminal: Mapping[str, frozenset[str]]
    first_status: Mapping[str, str]
    statuses_of: Mapping[str, frozenset[tuple[str, str]]]
    promotions_beside: Mapping[str, frozenset[str]]
    promotions: frozenset[str] = frozenset()

    @classmethod
    def build(cls, kinds: Kinds, handlers: Iterable[Any]) -> WakeRules:
        """Derive the rules from ``kinds`` and the (enabled) ``handlers``."""
        targets: dict[tuple[str, str], set[str]] = {}
        entry: dict[tuple[str, str], set[str]] = {}
        children: dict[tuple[str, str], set[str]] = {}
        statuses_of: dict[str, frozenset[tuple[str, str]]] = {}
        promotions: list[str] = []
        for handler in handlers:
            name = handler_name(handler)
            promotion = isinstance(handler, PromotionRule)
            if promotion:
                promotions.append(name)
            filters = () if promotion else fetch_filters(handler)
            aged = waits_for_age(filters)
            own = frozenset(str(s) for s in target_statuses(handler))
            # Fetched only past their timeout: nothing that just entered them matches.
            watched = frozenset(str(s) for s in getattr(handler, "watched_statuses", ()))
            statuses_of[name] = frozenset((handler.kind, s) for s in own)
            for status in own:
                targets.setdefault((handler.kind, status), set()).add(name)
                if not aged and status not in watched:
                    entry.setdefault((handler.kind, status), set()).add(name)
            child = kinds.child_of(handler.kind)
            if child is None:
                continue
            if promotion:
                statuses = promotion_child_statuses(handler, child.status_names)
            else:
                read = child_statuses_read(filters)
                statuses = frozenset(child.status_names) if _ANY_STATUS in read else read
            for status in statuses:
                children.setdefault((child.name, status), set()).add(name)
        first = {kind: frozenset(entry.get((kind, kinds[kind].first_status), ())) for kind in kinds}
        # A lifecycle handler's fetch locks and claims its targets, and a promotion
        # selecting meanwhile skips locked rows (SKIP LOCKED): the targets it left
        # where they were may be due for those promotions once it is done.
        beside = {
            name: frozenset(p for p in promotions if statuses_of[p] & mine)
            for name, mine in statuses_of.items()
            if name not in promotions
        }
        return cls(
            targets={k: frozenset(v) for k, v in targets.items()},
            entry={k: frozenset(v) for k, v in entry.items()},
            children={k: frozenset(v) for k, v in children.items()},
            first=first,
            terminal={kind: kinds[kind].terminal for kind in kinds},
            first_status={kind: kinds[kind].first_status for kind in kinds},
            statuses_of=statuses_of,
            promotions_beside=beside,
            promotions=frozenset(promotions),
        )

    def woken(self, kind: str | None, status: str) -> set[str]:
        """The handlers to wake when an entity of ``kind`` (``None``: any kind) enters
        ``status``."""
        kinds = list(self.terminal) if kind is None else [kind]
        names: set[str] = set()
        for k in kinds:
            names |= self.entry.get((k, status), frozenset())
            names |= self.children.get((k, status), frozenset())
            if status in self.terminal.get(k, frozenset()):
                # What ended freed what it held (an agent's capacity, say): the
                # entities waiting to start may fit now.
                names |= self.first.get(k, frozenset())
        return names

    def woken_by_move(self, kind: str, from_status: str, status: str) -> set[str]:
        """:meth:`woken` for an entity of ``kind`` moving from ``from_status`` to ``status``,
        without the promotion rules it was already a candidate of before the move.

        A rule's match depends on which of its statuses the entity is in, never on
        which one, and on its children: a move between two of its statuses (PENDING
        -> SCHEDULED for ``detect-start-failure``) cannot make a candidate of an entity
        that was not one.
        """
        names = self.woken(kind, status)
        if not self.promotions:
            return names
        before = (kind, from_status)
        return {
            n
            for n in names
            if n not in self.promotions
            or before not in self.statuses_of.get(n, frozenset())
            or n in self.children.get((kind, status), frozenset())
        }

    def newcomers(self) -> frozenset[str]:
        """The handlers woken by news of new entities: those woken on entry into a
        kind's first status."""
        return frozenset(
            n
            for kind, status in self.first_status.items()
            for n in self.entry.get((kind, status), ())
        )

    def keeps_status(self, handler: str, changes: Iterable[AppliedChange]) -> bool:
        """Whether a tick of ``handler`` made progress that leaves targets in its statuses:
        a named outcome applied (not a SKIPPED/IGNORED result, not a lost compare-and-set)
        that kept an entity in a status ``handler`` targets, so it has more to do now."""
        return any(
            c.to_status == c.from_status
            and not isinstance(c.result, SchedulingResult)
            and c.error_code is None
            and handler in self.targets.get((c.kind, str(c.to_status)), frozenset())
            for c in changes
        )
