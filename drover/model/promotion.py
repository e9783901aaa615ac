"""Promotions as data: a rule over a session's kernels, evaluated by the coordinator in SQL."""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from drover.model.status import KernelMatchType, KernelStatus, SessionStatus
from drover.model.values import HandlerOptions, StatusInfoRule

__all__ = ["PromotionRule"]


def _sessions(values: Iterable[SessionStatus]) -> frozenset[SessionStatus]:
    return frozenset(values)


def _kernels(values: Iterable[KernelStatus]) -> frozenset[KernelStatus]:
    return frozenset(values)


@attrs.frozen
class PromotionRule:
    """Sessions in ``from_statuses`` whose kernels meet ``match`` move to ``to_status``.

    ``match`` is ALL, ANY or NOT_ANY of the session's kernels being in
    ``kernel_statuses`` (a session with no kernels never matches).
    ``status_info`` optionally sets the promoted sessions' ``status_info``.
    Kernels are never changed by a promotion. Register a rule like a handler::

        register(PromotionRule("promote-to-ready", {READY_ISH}, {RUNNING}, ALL, RUNNING))
    """

    name: str
    from_statuses: frozenset[SessionStatus] = attrs.field(converter=_sessions)
    kernel_statuses: frozenset[KernelStatus] = attrs.field(converter=_kernels)
    match: KernelMatchType
    to_status: SessionStatus
    status_info: StatusInfoRule | None = None
    #: Only ``batch_size`` applies to promotions.
    options: HandlerOptions = attrs.field(factory=lambda: HandlerOptions(max_retries=None))
