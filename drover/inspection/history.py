"""History search (its filters checked), and the per-session timeline.

One order everywhere: the order rows were written (their ids), latest last, as
``journalctl`` and ``tail`` print; a row's time never goes back from one row to
the next (:func:`drover.storage.journal.history_time`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from drover.kinds.sessions.values import KERNEL_KIND
from drover.model.plan import MOVED
from drover.model.status import SchedulingResult
from drover.model.values import HistoryRecord
from drover.serialization import history_json, kernel_history_json
from drover.storage.queries import Queries

if TYPE_CHECKING:
    from drover.coordinator.handlers import Handler

__all__ = ["UnknownFilterError", "check_history_filters", "search_history", "timeline"]

#: Results any history may hold whatever handlers are loaded: the result classes, and
#: the rows of creations, reopenings and targeted moves.
ALWAYS_RESULTS = (*(r.value for r in SchedulingResult), "CREATED", "REOPENED", MOVED)
#: The writer of the API's rows (creations, terminations, spec changes).
API_WRITER = "api"


class UnknownFilterError(ValueError):
    """A history filter that names nothing the history can hold (one line: ``str()``)."""

    def __init__(self, option: str, detail: str) -> None:
        super().__init__(f"{option} {detail}")
        #: The filter (``result``, ``handler``, ``kind``).
        self.option = option


def _listed(names: Collection[str], most: int = 12) -> str:
    shown = sorted(names)
    more = f", … ({len(shown) - most} more)" if len(shown) > most else ""
    return ", ".join(shown[:most]) + more


async def check_history_filters(
    repo: Queries,
    *,
    kinds: Collection[str],
    handlers: Callable[[], Mapping[str, Handler]],
    handler: str | None = None,
    result: str | None = None,
    kind: str | None = None,
) -> None:
    """Refuse (:class:`UnknownFilterError`) a filter that can select no row: a kind not
    among ``kinds``; a handler neither loaded nor the writer of any row; a result neither
    a result class, a named outcome of a loaded handler, nor the result of any row.

    ``handlers`` is called (handlers loaded) only for a name the history has never held.
    """
    if kind is not None and kind not in kinds:
        raise UnknownFilterError("kind", f"{kind!r}: no such kind; kinds: {_listed(kinds)}")
    if handler is not None and handler != API_WRITER:
        loaded = None if await repo.history_has(handler=handler) else handlers()
        if loaded is not None and handler not in loaded:
            raise UnknownFilterError(
                "handler",
                f"{handler!r}: no handler of that name is loaded or wrote history; "
                f"handlers: {_listed([*loaded, API_WRITER])}",
            )
    if result is None or result in ALWAYS_RESULTS or await repo.history_has(result=result):
        return
    from drover.model.promotion import PromotionRule  # only when handlers are loaded

    named = {
        outcome
        for h in handlers().values()
        if not isinstance(h, PromotionRule)
        for outcome in type(h).status_transitions().outcomes
    }
    if result not in named:
        raise UnknownFilterError(
            "result",
            f"{result!r}: not a result ({', '.join(ALWAYS_RESULTS)}), nor a named "
            f"outcome of a loaded handler ({_listed(named) or 'none'}), nor in history",
        )


async def search_history(
    repo: Queries,
    *,
    session_id: str | None = None,
    kernel_id: str | None = None,
    handler: str | None = None,
    result: SchedulingResult | str | None = None,
    since: float | None = None,
    until: float | None = None,
    limit: int = 100,
    kind: str | None = None,
) -> list[HistoryRecord]:
    """The latest ``limit`` history rows matching the filters, in the order they were
    written (latest last).

    ``kernel_id`` restricts to the history of that kernel's session.
    """
    if kernel_id is not None:
        kernel = await repo.read_one(KERNEL_KIND, kernel_id)
        session_id = kernel.session_id
    newest = await repo.search_history(
        kind=kind,
        session_id=session_id,
        handler=handler,
        result=result,
        since=since,
        until=until,
        limit=limit,
        newest_first=True,
    )
    return newest[::-1]


async def timeline(
    repo: Queries, session_id: str, *, history: Sequence[HistoryRecord] | None = None
) -> list[dict[str, Any]]:
    """Session and kernel history interleaved, oldest first (``kind``: session|kernel).

    ``history``: the session's history rows, if the caller already read them.
    """
    items: list[tuple[float, int, dict[str, Any]]] = []
    if history is None:
        history = await repo.history(session_id)
    for row in history:
        items.append(
            (
                row.created_at.timestamp(),
                0,
                {"kind": "session", "at": history_json(row)["created_at"], **history_json(row)},
            )
        )
    for krow in await repo.changes(parent_id=session_id):
        data = kernel_history_json(krow)
        items.append(
            (krow.created_at.timestamp(), 1, {"kind": "kernel", "at": data["created_at"], **data})
        )
    items.sort(key=lambda item: (item[0], item[1], item[2]["id"]))
    return [item[2] for item in items]
