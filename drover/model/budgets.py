"""What a handler sees of a named budget (:class:`~drover.model.kinds.Budget`): used and limit."""

from __future__ import annotations

import attrs

__all__ = ["BudgetUse"]


@attrs.frozen
class BudgetUse:
    """One named budget of one entity: how much is ``used`` and its ``limit``.

    ``limit`` is resolved as the engine judges it (the entity's
    ``spec["budgets"]``, else configuration, else the kind's default;
    ``None``: no limit). The charge that takes ``used`` past ``limit`` gives
    up. ``str()`` is ``used/limit`` (``3/5``, or ``3/∞`` without a limit).
    """

    used: int
    limit: int | None

    @property
    def left(self) -> int | None:
        """Charges still allowed before the one that gives up (``None``: no limit)."""
        return None if self.limit is None else max(self.limit - self.used, 0)

    def __str__(self) -> str:
        return f"{self.used}/{'∞' if self.limit is None else self.limit}"
