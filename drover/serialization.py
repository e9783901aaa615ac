"""Every JSON shape drover prints or serves, and every timestamp format, defined once.

The CLI's ``--json`` and the dashboard's ``/api/…`` both use these functions,
so a field has the same name and format wherever it appears. A kind package
under :mod:`drover.kinds` adds the shapes of its own kinds (deployments and
routes: :mod:`drover.kinds.deployments.serialization`), built on these. Timestamps in
JSON are ISO 8601 in UTC with milliseconds; on pages and in tables they are
``YYYY-MM-DD HH:MM:SS`` UTC.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import attrs

from drover.kinds.sessions.values import SESSION_KIND, KernelInfo, SessionWithKernels
from drover.model.kinds import EntityKind
from drover.model.values import (
    CoordinatorInfo,
    Entity,
    HistoryRecord,
    KernelHistoryRecord,
    TerminationOutcome,
)

if TYPE_CHECKING:
    from drover.inspection.stats import Stats
    from drover.inspection.why import Diagnosis
    from drover.plugins.graph import Edge
    from drover.storage.stats import HandlerErrors

__all__ = [
    "coordinator_json",
    "diagnosis_json",
    "display_time",
    "entity_json",
    "graph_json",
    "handler_errors_json",
    "history_json",
    "iso",
    "kernel_history_json",
    "kernel_json",
    "session_json",
    "stats_json",
    "termination_json",
]


def iso(value: datetime | None) -> str | None:
    """An aware datetime as ISO 8601 in UTC with milliseconds, or ``None``."""
    return value.astimezone(UTC).isoformat(timespec="milliseconds") if value is not None else None


def display_time(value: datetime | None) -> str:
    """An aware datetime as ``YYYY-MM-DD HH:MM:SS`` (UTC) for pages and tables; ``""`` for none."""
    if value is None:
        return ""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def kernel_json(kernel: KernelInfo, index: int) -> dict[str, Any]:
    """One kernel; ``index`` is its 1-based position in its session (as ``drover show``)."""
    runtime = kernel.runtime or {}
    return {
        "id": kernel.id,
        "index": index,
        "status": kernel.status.value,
        "status_info": kernel.status_info,
        "agent_id": kernel.agent_id,
        "exit_code": kernel.exit_code,
        "pid": runtime.get("pid"),
        "container": runtime.get("container"),
        "devices": runtime.get("devices"),
        "stdout": runtime.get("stdout"),
        "stderr": runtime.get("stderr"),
        "status_changed_at": iso(kernel.status_changed_at),
        "spec": kernel.spec,
    }


def session_json(session: SessionWithKernels) -> dict[str, Any]:
    """A session with its kernels.

    ``tries`` maps each handler to its failures in the current status;
    ``try_count`` is the highest of them.
    """
    return {
        "id": session.id,
        "name": session.name,
        "status": session.status.value,
        "status_info": session.status_info,
        "result": session.result,
        "priority": session.priority,
        "try_count": session.try_count,
        "tries": dict(session.tries),
        "requeues": session.requeues,
        "created_at": iso(session.created_at),
        "status_changed_at": iso(session.status_changed_at),
        "spec": session.spec,
        "kernels": [kernel_json(k, i) for i, k in enumerate(session.kernels, start=1)],
    }


def entity_json(entity: Entity) -> dict[str, Any]:
    """An entity of any kind with its children (sessions: :func:`session_json`)."""
    return {
        "id": entity.id,
        "kind": entity.kind,
        "name": entity.name,
        "parent_id": entity.parent_id,
        "status": str(entity.status),
        "status_info": entity.status_info,
        "result": entity.result,
        "priority": entity.priority,
        "tries": dict(entity.tries),
        "requeues": entity.requeues,
        "budgets": {
            name: {"used": use.used, "limit": use.limit}
            for name, use in (entity.budgets or {}).items()
        },
        "created_at": iso(entity.created_at),
        "status_changed_at": iso(entity.status_changed_at),
        "spec": entity.spec,
        "data": entity.data,
        "children": [
            {
                "id": c.id,
                "kind": c.kind,
                "status": str(c.status),
                "status_info": c.status_info,
                "result": c.result,
                "exit_code": c.exit_code,
                "spec": c.spec,
                "data": c.data,
            }
            for c in entity.children
        ],
    }


def history_json(row: HistoryRecord) -> dict[str, Any]:
    """A scheduling history row: ``entity_id`` and its ``kind`` name what the row is about;
    ``session_id`` (the same id) is there only when that is a session."""
    about: dict[str, Any] = {"entity_id": row.entity_id, "kind": row.kind}
    if row.kind == SESSION_KIND:
        about["session_id"] = row.entity_id
    return {
        "id": row.id,
        **about,
        "handler": row.handler,
        "result": str(row.result),
        "from_status": str(row.from_status),
        "to_status": str(row.to_status),
        "error_code": row.error_code,
        "message": row.message,
        "attempts": row.attempts,
        "created_at": iso(row.created_at),
        "updated_at": iso(row.updated_at),
    }


def kernel_history_json(row: KernelHistoryRecord) -> dict[str, Any]:
    """A kernel status change."""
    return {
        "id": row.id,
        "kernel_id": row.kernel_id,
        "session_id": row.session_id,
        "source": row.source,
        "from_status": str(row.from_status),
        "to_status": str(row.to_status),
        "message": row.message,
        "created_at": iso(row.created_at),
    }


def coordinator_json(info: CoordinatorInfo) -> dict[str, Any]:
    """A coordinator process and its heartbeat."""
    return {
        "id": info.id,
        "host": info.host,
        "pid": info.pid,
        "version": info.version,
        "started_at": iso(info.started_at),
        "heartbeat_at": iso(info.heartbeat_at),
        "handlers": list(info.handlers) if info.handlers is not None else None,
    }


def termination_json(outcome: TerminationOutcome) -> dict[str, Any]:
    """What a termination request did to one session."""
    return {
        "id": outcome.session_id,
        "kind": outcome.kind,
        "from_status": str(outcome.from_status),
        "to_status": str(outcome.to_status),
        "changed": outcome.changed,
    }


def diagnosis_json(diagnosis: Diagnosis) -> dict[str, Any]:
    """``drover why``: why a session is where it is."""
    return {
        "session_id": diagnosis.session_id,
        "name": diagnosis.name,
        "status": str(diagnosis.status),
        "held_for_s": round(diagnosis.held_for_s, 3),
        "terminal": diagnosis.terminal,
        "owners": list(diagnosis.owners),
        "last_problem": diagnosis.last_problem,
        "lines": list(diagnosis.lines),
    }


def stats_json(stats: Stats) -> dict[str, Any]:
    """``drover stats``: per-handler tick figures and per-status ages."""
    return {
        "since": stats.since,
        "kind": stats.kind,
        "handlers": [attrs.asdict(h) for h in stats.handlers],
        "statuses": [
            {
                "status": str(s.status),
                "sessions": s.sessions,
                "p50_age_s": round(s.p50_age_s, 3),
                "p95_age_s": round(s.p95_age_s, 3),
            }
            for s in stats.statuses
        ],
    }


def graph_json(edges: Iterable[Edge], kind: EntityKind) -> dict[str, Any]:
    """The state machine of ``kind``: nodes (every status of the kind) and edges."""
    from drover.plugins.graph import ordered_edges

    return {
        "kind": kind.name,
        "nodes": [{"status": s, "terminal": s in kind.terminal} for s in kind.status_names],
        "edges": [
            {
                "source": str(e.source),
                "target": str(e.target),
                "handler": e.handler,
                "outcome": e.outcome,
            }
            for e in ordered_edges(edges, kind)
        ],
    }


def handler_errors_json(errors: Iterable[HandlerErrors]) -> list[dict[str, Any]]:
    """Failing handlers: how often, when last, and what."""
    return [
        {
            "handler": e.handler,
            "errors": e.count,
            "last_at": iso(datetime.fromtimestamp(e.last_at, UTC)),
            "last_error": e.last_error,
        }
        for e in errors
    ]
