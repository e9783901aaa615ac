"""Promotions as data: a rule over an entity's children, evaluated by the coordinator in SQL."""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from drover.model.status import KernelMatchType
from drover.model.values import HandlerOptions, StatusInfoRule

__all__ = ["PromotionRule"]


def _statuses(values: Iterable[str]) -> frozenset[str]:
    return frozenset(values)


@attrs.frozen
class PromotionRule:
    """Entities in ``from_statuses`` whose children meet ``match`` move to ``to_status``.

    ``match`` is ALL, ANY or NOT_ANY of the entity's children (a session's
    kernels) being in ``kernel_statuses`` (an entity with no children never
    matches). ``kind`` says which entities (``""``, the default: the registered
    default kind, :attr:`~drover.model.kinds.Kinds.default`).
    ``status_info`` optionally sets the promoted sessions' ``status_info``;
    ``copy_child_info`` copies it from the matching child instead (the one in
    ``kernel_statuses`` that changed last and has one: a task FAILED with
    ``OOM_KILLED`` gives its job ``OOM_KILLED``), falling back to ``status_info``.
    Kernels are never changed by a promotion. Register a rule like a handler::

        register(PromotionRule("promote-to-ready", {READY_ISH}, {RUNNING}, ALL, RUNNING))
    """

    name: str
    from_statuses: frozenset[str] = attrs.field(converter=_statuses)
    kernel_statuses: frozenset[str] = attrs.field(converter=_statuses)
    match: KernelMatchType
    to_status: str
    status_info: StatusInfoRule | None = None
    #: Only ``batch_size`` applies to promotions.
    options: HandlerOptions = attrs.field(factory=lambda: HandlerOptions(max_retries=None))
    kind: str = ""
    copy_child_info: bool = False
