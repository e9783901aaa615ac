"""The statements of :mod:`drover.storage.kernels`: backend reports, placements, agents' usage.

A backend's reports are pushed reports (:mod:`drover.storage.statements.reports`).
:data:`ASSIGN_AGENT` places kernels,
:func:`usage_per_agent` sums what agents hold, and :data:`KERNELS_IN`,
:data:`KERNEL_STATUSES` and :data:`KERNEL_BY_ID` read kernels back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from drover.kinds.sessions.values import HOLDING_KERNEL_STATUSES, KernelStatus
from drover.storage.rows import KERNEL_COLUMNS
from drover.storage.schema import entities
from drover.storage.statements.ids import checked_only

__all__ = [
    "ASSIGN_AGENT",
    "KERNELS_IN",
    "KERNEL_BY_ID",
    "KERNEL_KIND",
    "KERNEL_STATUSES",
    "SET_STATUS_INFO",
    "numeric_request",
    "usage_per_agent",
]

e = entities
#: The kernel kind, in the spelling of backends (:class:`~drover.model.values.KernelInfo`).
KERNEL_KIND = "kernel"


#: ``status_info = :info`` of the kernel ``:kid`` while it is still in ``:status`` (a
#: backend's progress words; no status change, so no history row).
SET_STATUS_INFO = (
    sa.update(e)
    .where(e.c.id == sa.bindparam("kid"), e.c.status == sa.bindparam("b_status"))
    .values(status_info=sa.bindparam("info", type_=sa.Text))
)


def numeric_request(slot: str, postgres: bool) -> sa.ColumnElement[Any]:
    """``spec[slot]`` when it is a JSON number, else 0: a bad value never breaks the sum."""
    if postgres:
        is_number = sa.func.jsonb_typeof(e.c.spec[slot]) == "number"
    else:
        is_number = sa.func.json_type(e.c.spec, f'$."{slot}"').in_(["integer", "real"])
    return sa.case((is_number, e.c.spec[slot].as_float()), else_=0.0)


def usage_per_agent(slots: Sequence[str], postgres: bool) -> sa.Select[Any]:
    """Per agent: its id, then the sum of each of ``slots`` over its placed, live kernels.

    Live: neither PENDING nor ended
    (:data:`drover.model.rules.HOLDING_KERNEL_STATUSES`).
    """
    columns = [
        sa.func.sum(numeric_request(name, postgres)).label(f"s{i}") for i, name in enumerate(slots)
    ]
    return (
        sa.select(e.c.agent_id, *columns)
        .where(
            e.c.kind == KERNEL_KIND,
            # A positive list so the (kind, status) index serves it: ended
            # kernels, the bulk of the table, are never read.
            e.c.status.in_(sorted(s.value for s in HOLDING_KERNEL_STATUSES)),
            e.c.agent_id.is_not(None),
        )
        .group_by(e.c.agent_id)
    )


# The two statements below find their rows by id on both databases; kind and status
# are checked as expressions (checked_only) so that SQLite never walks the
# (kind, status) index instead: every kernel ever run, for a backend's monitor that
# asks after a few. PostgreSQL plans the expression as the same filter.

#: ``agent_id = :b_agent`` on the PENDING kernels among ``:ids`` (a list).
ASSIGN_AGENT = (
    sa.update(e)
    .where(
        e.c.id.in_(sa.bindparam("ids", expanding=True)),
        checked_only(e.c.status) == KernelStatus.PENDING.value,
    )
    .values(agent_id=sa.bindparam("b_agent"))
)

#: Every kernel (:data:`~drover.storage.rows.KERNEL_COLUMNS`) in ``:statuses`` (a list), by id.
KERNELS_IN = (
    sa.select(*KERNEL_COLUMNS)
    .where(e.c.kind == KERNEL_KIND, e.c.status.in_(sa.bindparam("statuses", expanding=True)))
    .order_by(e.c.id)
)

#: Id and status of the kernels among ``:ids`` (a list).
KERNEL_STATUSES = sa.select(e.c.id, e.c.status).where(
    e.c.id.in_(sa.bindparam("ids", expanding=True)), checked_only(e.c.kind) == KERNEL_KIND
)

#: The kernel ``:b_id`` (:data:`~drover.storage.rows.KERNEL_COLUMNS`).
KERNEL_BY_ID = sa.select(*KERNEL_COLUMNS).where(
    e.c.id == sa.bindparam("b_id"), e.c.kind == KERNEL_KIND
)
