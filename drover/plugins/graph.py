"""The session state machine implied by the loaded handlers, and its whole-graph checks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from drover.coordinator.handlers import Handler, target_statuses
from drover.model.promotion import PromotionRule
from drover.model.rules import REQUEUE_LIMIT_STATUS, is_requeue, termination_of
from drover.model.status import TERMINAL_SESSION_STATUSES, SessionStatus

__all__ = [
    "Edge",
    "GraphWarning",
    "check_graph",
    "edges_of",
    "ordered_edges",
    "render_dot",
    "render_mermaid",
    "render_text",
]

_OUTCOMES = ("success", "need_retry", "expired", "give_up")
_START = SessionStatus.PENDING


@attrs.frozen
class Edge:
    """One possible session status change: ``source --handler: outcome--> target``."""

    source: SessionStatus
    target: SessionStatus
    handler: str
    outcome: str


@attrs.frozen
class GraphWarning:
    """A problem of the whole state machine; ``status`` is where it shows."""

    kind: str
    status: SessionStatus
    message: str


#: Changes the repository itself makes on a termination request (handler ``api``).
API_EDGES = tuple(
    Edge(s, termination.to_session, "api", "terminate")
    for s in SessionStatus
    if (termination := termination_of(s, has_kernels=True)) is not None
)


def edges_of(handlers: Mapping[str, Handler], *, include_api: bool = True) -> list[Edge]:
    """Every session status change the handlers (and the API) can make.

    An expired or give-up transition that sends sessions back also has a
    ``requeue-limit`` edge: past their requeue budget they end there instead.
    """
    edges: list[Edge] = []
    for name, handler in sorted(handlers.items()):
        targets = sorted(target_statuses(handler))
        if isinstance(handler, PromotionRule):
            to = handler.to_status
            edges.extend(Edge(s, to, name, "promotion") for s in targets if s != to)
            continue
        transitions = type(handler).status_transitions()
        for outcome in _OUTCOMES:
            transition = getattr(transitions, outcome)
            if transition is None or transition.session is None:
                continue
            for s in targets:
                if s == transition.session:
                    continue
                edges.append(Edge(s, transition.session, name, outcome))
                if outcome in ("expired", "give_up") and is_requeue(s, transition.session):
                    edges.append(Edge(s, REQUEUE_LIMIT_STATUS, name, "requeue-limit"))
    if include_api:
        edges.extend(API_EDGES)
    return list(dict.fromkeys(edges))


def _reachable(start: Iterable[SessionStatus], edges: list[Edge]) -> set[SessionStatus]:
    seen = set(start)
    frontier = list(seen)
    while frontier:
        current = frontier.pop()
        for edge in edges:
            if edge.source == current and edge.target not in seen:
                seen.add(edge.target)
                frontier.append(edge.target)
    return seen


def check_graph(handlers: Mapping[str, Handler]) -> list[GraphWarning]:
    """Warnings about the whole state machine built from ``handlers``.

    * a non-terminal status no handler targets: sessions there sit forever;
    * a handler whose ``need_retry`` moves the status: every retry resets its
      tries, so ``max_retries`` can never fire;
    * a non-terminal status from which no path leads to a terminal status;
    * a non-terminal status (other than PENDING, where sessions are created)
      that no transition can reach.
    """
    warnings: list[GraphWarning] = []
    edges = edges_of(handlers)
    handler_edges = edges_of(handlers, include_api=False)
    targeted = {s for h in handlers.values() for s in target_statuses(h)}
    live = [s for s in SessionStatus if s not in TERMINAL_SESSION_STATUSES]
    for status in live:
        if status not in targeted:
            warnings.append(
                GraphWarning(
                    "untargeted",
                    status,
                    f"no handler targets {status}: sessions in it would sit there forever",
                )
            )
    for name, handler in sorted(handlers.items()):
        if isinstance(handler, PromotionRule):
            continue
        retry = type(handler).status_transitions().need_retry
        if retry is None or retry.session is None:
            continue
        for status in sorted(target_statuses(handler)):
            if retry.session != status:
                warnings.append(
                    GraphWarning(
                        "retry-moves",
                        status,
                        f"handler {name}: need_retry moves {status} to {retry.session}, which "
                        "resets its tries on every retry, so max_retries can never give up",
                    )
                )
    for status in live:
        # Only handler moves count here: a termination request needs a person.
        if not (_reachable([status], handler_edges) & TERMINAL_SESSION_STATUSES):
            warnings.append(
                GraphWarning(
                    "no-exit",
                    status,
                    f"no sequence of handler transitions leads from {status} to a terminal "
                    f"status ({', '.join(sorted(TERMINAL_SESSION_STATUSES))})",
                )
            )
    incoming = {e.target for e in edges}
    for status in live:
        if status != _START and status not in incoming:
            warnings.append(
                GraphWarning(
                    "unreachable",
                    status,
                    f"no transition leads to {status}: only sessions created in it get there",
                )
            )
    return warnings


def _label(edge: Edge) -> str:
    return f"{edge.handler}: {edge.outcome}"


def ordered_edges(edges: Iterable[Edge]) -> list[Edge]:
    order = {s: i for i, s in enumerate(SessionStatus)}
    return sorted(edges, key=lambda e: (order[e.source], order[e.target], e.handler, e.outcome))


def render_text(edges: Iterable[Edge]) -> str:
    """One line per edge: ``PENDING -> SCHEDULED  [schedule-sessions: success]``."""
    return "\n".join(
        f"{e.source.value:<11} -> {e.target.value:<11}  [{_label(e)}]" for e in ordered_edges(edges)
    )


def render_mermaid(edges: Iterable[Edge]) -> str:
    """A Mermaid ``stateDiagram-v2``; ``#58;`` stands for the colon inside labels."""
    lines = ["stateDiagram-v2", "    [*] --> PENDING"]
    for e in ordered_edges(edges):
        lines.append(f"    {e.source.value} --> {e.target.value} : {e.handler}#58; {e.outcome}")
    for status in sorted(TERMINAL_SESSION_STATUSES):
        lines.append(f"    {status.value} --> [*]")
    return "\n".join(lines)


def _escaped(text: str) -> str:
    """``text`` inside a DOT double-quoted string."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def render_dot(
    edges: Iterable[Edge],
    *,
    grouped: bool = False,
    colours: Mapping[str, tuple[str, str]] | None = None,
    rankdir: str = "LR",
) -> str:
    """A Graphviz ``digraph`` of every session status and ``edges``.

    The one place DOT is written: ``drover graph --format dot`` prints it and
    the dashboard has Graphviz lay it out. Terminal statuses have a double
    border; each status node has the id ``status-<STATUS>``. ``grouped`` draws
    one edge per pair of statuses, labelled with each ``handler: outcomes`` on
    a line of its own (else one edge per handler outcome); ``colours`` maps a
    status to its (fill, text) colours.
    """
    lines = [
        "digraph drover {",
        f"    rankdir={rankdir};",
        '    node [shape=box, style="rounded,filled", fillcolor="#ffffff", '
        'fontname="Helvetica,Arial,sans-serif"];',
        '    edge [fontname="Helvetica,Arial,sans-serif", fontsize=10];',
    ]
    for status in SessionStatus:
        attributes = [f'id="status-{status.value}"']
        if status in TERMINAL_SESSION_STATUSES:
            attributes.append("peripheries=2")
        if colours and status.value in colours:
            fill, text = colours[status.value]
            attributes += [f'fillcolor="{fill}"', f'fontcolor="{text}"']
        lines.append(f'    "{status.value}" [{", ".join(attributes)}];')
    ordered = ordered_edges(edges)
    if grouped:
        pairs: dict[tuple[SessionStatus, SessionStatus], dict[str, list[str]]] = {}
        for e in ordered:
            pairs.setdefault((e.source, e.target), {}).setdefault(e.handler, []).append(e.outcome)
        for (source, target), handlers in pairs.items():
            # The DOT escape \\n (a backslash and n) breaks the label: a line per handler.
            label = "\\n".join(
                _escaped(f"{h}: {', '.join(o)}") for h, o in sorted(handlers.items())
            )
            lines.append(f'    "{source.value}" -> "{target.value}" [label="{label}"];')
    else:
        for e in ordered:
            lines.append(
                f'    "{e.source.value}" -> "{e.target.value}" [label="{_escaped(_label(e))}"];'
            )
    lines.append("}")
    return "\n".join(lines)
