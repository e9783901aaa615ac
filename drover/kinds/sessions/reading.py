"""The session kind's own readers: rows to :class:`SessionWithKernels` and :class:`KernelInfo`.

Storage reads any kind into :class:`~drover.model.values.Entity`; the session
and kernel kinds declare these readers instead
(:attr:`~drover.model.kinds.EntityKind.reader`), called by storage with rows
of :data:`~drover.storage.rows.ENTITY_COLUMNS` and the kernels' rows of
:data:`~drover.storage.rows.CHILD_COLUMNS` (:class:`drover.storage.rows.Reader`).

This is the hot path of every lifecycle tick (a thousand sessions and four
thousand kernels): the per-row work is inlined, a timestamp cache included,
because a call per column costs more than the lookup it wraps. Kernels read
together with identical spec text share one decoded, read-only spec.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any

from drover.kinds.sessions.values import KernelInfo, KernelStatus, SessionStatus, SessionWithKernels
from drover.model.values import Claim
from drover.storage.rows import decode_json

__all__ = ["read_kernels", "read_sessions"]

_SESSION_STATUS: dict[str, SessionStatus] = {s.value: s for s in SessionStatus}
_KERNEL_STATUS: dict[str, KernelStatus] = {s.value: s for s in KernelStatus}


#: A kernel's id, as a sort key (C-level: called for every kernel of every tick).
_kernel_id = attrgetter("id")


def _kernels_by_session(
    kernel_rows: Sequence[Sequence[Any]], seen_times: dict[float, datetime]
) -> dict[str, list[KernelInfo]]:
    """Kernels (rows of CHILD_COLUMNS) by session, each list in id (creation) order."""
    seen_specs: dict[str, Any] = {}
    from_ts = datetime.fromtimestamp
    kernel_status = _KERNEL_STATUS
    by_session: dict[str, list[KernelInfo]] = {}
    for kid, sid, status, changed, agent, spec, code, info, runtime in kernel_rows:
        at = seen_times.get(changed)
        if at is None:
            at = seen_times[changed] = from_ts(changed, UTC)
        if spec.__class__ is str:
            text = spec
            spec = seen_specs.get(text)
            if spec is None:
                spec = seen_specs[text] = decode_json(text)
        kernel = KernelInfo(
            kid,
            sid,
            kernel_status[status],
            at,
            agent,
            spec,
            code,
            info,
            runtime if runtime is None else decode_json(runtime),
        )
        found = by_session.get(sid)
        if found is None:
            by_session[sid] = [kernel]
        else:
            found.append(kernel)
    for kernels in by_session.values():
        if len(kernels) > 1:
            # Ids are time-ordered: id order is creation order. Rows mostly
            # arrive in it already, which a sort sees in one pass.
            kernels.sort(key=_kernel_id)
    return by_session


def read_sessions(
    rows: Sequence[Sequence[Any]],
    child_rows: Sequence[Sequence[Any]],
    handler: str | None = None,
    claim: Claim | None = None,
) -> list[SessionWithKernels]:
    """Sessions in the order of ``rows``, each with its kernels in id order.

    ``try_count`` is ``handler``'s count, or the highest of any handler;
    ``claim``, the tick's, is given to each session.
    """
    seen_times: dict[float, datetime] = {}
    from_ts = datetime.fromtimestamp
    by_session = _kernels_by_session(child_rows, seen_times)
    session_status = _SESSION_STATUS
    no_kernels: list[KernelInfo] = []
    out: list[SessionWithKernels] = []
    append = out.append
    for row in rows:
        (sid, _kind, name, status, changed, priority, created, spec, data, info, result,
         tries_text, requeues, budgets, _parent, _code, _agent, _runtime) = row  # fmt: skip
        # One dict per session: JSON null reads as no tries, like SQL NULL.
        tries: dict[str, int] = (decode_json(tries_text) or {}) if tries_text is not None else {}
        if handler is not None:
            try_count = tries.get(handler, 0) if tries else 0
        else:
            try_count = max(tries.values(), default=0)
        at = seen_times.get(changed)
        if at is None:
            at = seen_times[changed] = from_ts(changed, UTC)
        born = seen_times.get(created)
        if born is None:
            born = seen_times[created] = from_ts(created, UTC)
        append(
            SessionWithKernels(
                sid,
                name or "",
                session_status[status],
                at,
                try_count,
                priority,
                born,
                decode_json(spec),
                info,
                result,
                tuple(by_session.get(sid, no_kernels)),
                tries,
                requeues,
                None if data is None else decode_json(data),
                None if budgets is None else decode_json(budgets),
                claim,
            )
        )
    return out


def read_kernels(
    rows: Sequence[Sequence[Any]],
    child_rows: Sequence[Sequence[Any]] = (),
    handler: str | None = None,
    claim: Claim | None = None,
) -> list[KernelInfo]:
    """Kernels in the order of ``rows`` (they have no children)."""
    seen: dict[float, datetime] = {}
    narrow = [(r[0], r[14], r[3], r[4], r[16], r[7], r[15], r[9], r[17]) for r in rows]
    kernels = _kernels_by_session(narrow, seen)
    position = {r[0]: i for i, r in enumerate(rows)}
    return sorted((k for ks in kernels.values() for k in ks), key=lambda k: position[k.id])
