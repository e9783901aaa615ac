"""What a handler sees of a named budget (:class:`~drover.model.kinds.Budget`): used and limit."""

from __future__ import annotations

import attrs

from drover.model.deprecation import warn_moved

__all__ = ["BudgetUse"]


@attrs.frozen(eq=False)
class BudgetUse:
    """One named budget of one entity: how much is ``used`` and its ``limit``.

    ``limit`` is resolved as the engine judges it (the entity's
    ``spec["budgets"]``, else configuration, else the kind's default;
    ``None``: no limit). The charge that takes ``used`` past ``limit`` gives
    up. ``str()`` is ``used/limit`` (``3/5``, or ``3/∞`` without a limit).

    ``Entity.budgets`` held plain counts (``{name: used}``) early in 0.1. So
    that a plugin written then keeps working, a BudgetUse still compares with
    a number, adds to one and converts to ``int`` as its ``used`` did, each
    time with a ``DeprecationWarning`` naming ``.used`` (until 0.3).
    """

    used: int
    limit: int | None

    @property
    def left(self) -> int | None:
        """Charges still allowed before the one that gives up (``None``: no limit)."""
        return None if self.limit is None else max(self.limit - self.used, 0)

    def __str__(self) -> str:
        return f"{self.used}/{'∞' if self.limit is None else self.limit}"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BudgetUse):
            return (self.used, self.limit) == (other.used, other.limit)
        if isinstance(other, int | float):
            return self._as_count() == other
        return NotImplemented

    def __hash__(self) -> int:
        # Equal to its count when compared with a number (above), so hashed as that count.
        return hash(self.used)

    # -- deprecated: a BudgetUse taken for the count Entity.budgets held early in 0.1 --------

    def _as_count(self) -> int:
        # Warns at the caller of the operator: warn_moved < _as_count < __lt__ < caller.
        warn_moved("a BudgetUse as a count", "BudgetUse.used", stacklevel=4)
        return self.used

    def __lt__(self, other: object) -> bool:
        return self._as_count() < other if isinstance(other, int | float) else NotImplemented

    def __le__(self, other: object) -> bool:
        return self._as_count() <= other if isinstance(other, int | float) else NotImplemented

    def __gt__(self, other: object) -> bool:
        return self._as_count() > other if isinstance(other, int | float) else NotImplemented

    def __ge__(self, other: object) -> bool:
        return self._as_count() >= other if isinstance(other, int | float) else NotImplemented

    def __add__(self, other: int) -> int:
        return self._as_count() + other if isinstance(other, int) else NotImplemented

    def __radd__(self, other: int) -> int:
        return other + self._as_count() if isinstance(other, int) else NotImplemented

    def __sub__(self, other: int) -> int:
        return self._as_count() - other if isinstance(other, int) else NotImplemented

    def __rsub__(self, other: int) -> int:
        return other - self._as_count() if isinstance(other, int) else NotImplemented

    def __int__(self) -> int:
        return self._as_count()

    def __index__(self) -> int:
        return self._as_count()
