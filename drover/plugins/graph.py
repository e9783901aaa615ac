"""The state machine of each kind implied by the loaded handlers, and its whole-graph checks.

Every function takes the kind (an :class:`~drover.model.kinds.EntityKind`, as
registered); ``drover graph --kind`` and the dashboard draw one graph per kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from drover.coordinator.handlers import Handler, LoadedHandlers, target_statuses
from drover.model.kinds import EntityKind
from drover.model.promotion import PromotionRule

__all__ = [
    "Edge",
    "GraphWarning",
    "check_graph",
    "edges_of",
    "ordered_edges",
    "parent_edges",
    "render_dot",
    "render_mermaid",
    "render_text",
    "report_edges",
]

_OUTCOMES = ("success", "need_retry", "expired", "give_up")


@attrs.frozen
class Edge:
    """One possible status change: ``source --handler: outcome--> target``."""

    source: str
    target: str
    handler: str
    outcome: str


@attrs.frozen
class GraphWarning:
    """A problem of the whole state machine; ``status`` is where it shows."""

    kind: str
    status: str
    message: str


def api_edges(kind: EntityKind) -> tuple[Edge, ...]:
    """Changes the repository itself makes on a termination request (handler ``api``)."""
    return tuple(
        Edge(s, rule.to, "api", "terminate" if mode is None else f"terminate:{mode}")
        for mode in (None, *sorted(kind.termination_modes))
        for s in kind.status_names
        if (rule := kind.termination_of(s, has_children=True, mode=mode)) is not None
    )


def report_edges(kind: EntityKind) -> tuple[Edge, ...]:
    """Changes only pushed reports make, as the kind declares them (``reported``)."""
    return tuple(Edge(a, b, "report", "reported") for a, b in sorted(kind.reported))


def _of_kind(handlers: Mapping[str, Handler], kind: EntityKind) -> list[tuple[str, Handler]]:
    return [(n, h) for n, h in sorted(handlers.items()) if h.kind == kind.name]


def _timeout(handlers: Mapping[str, Handler], name: str, handler: Handler) -> float | None:
    """The handler's timeout: as loaded (configuration included), else as declared."""
    loaded = handlers.options.get(name) if isinstance(handlers, LoadedHandlers) else None
    if loaded is not None:
        return loaded.timeout
    if isinstance(handler, PromotionRule):
        return handler.options.timeout
    return type(handler).default_options().timeout


def edges_of(
    handlers: Mapping[str, Handler], *, kind: EntityKind, include_api: bool = True
) -> list[Edge]:
    """Every status change of ``kind`` the handlers (and the API) can make.

    An expired or give-up transition that sends entities back also has a
    ``requeue-limit`` edge: past their requeue budget they end there instead.
    Named outcomes are edges labelled with their name; a budget with its own
    give-up is an edge from every target status, labelled ``budget:<name>``.
    An ``expired`` edge is drawn only for a handler with a timeout (its declared
    options, or the configured ones when ``handlers`` is a coordinator's
    :class:`~drover.coordinator.handlers.LoadedHandlers`): without one nothing expires.
    """
    edges: list[Edge] = []
    for name, handler in _of_kind(handlers, kind):
        targets = sorted(str(s) for s in target_statuses(handler))
        if isinstance(handler, PromotionRule):
            to = str(handler.to_status)
            edges.extend(Edge(s, to, name, "promotion") for s in targets if s != to)
            continue
        transitions = type(handler).status_transitions()
        declared = [(o, getattr(transitions, o)) for o in _OUTCOMES]
        declared += sorted(transitions.outcomes.items())
        timed = _timeout(handlers, name, handler) is not None
        for outcome, transition in declared:
            if transition is None or transition.to is None:
                continue
            if outcome == "expired" and not timed:
                continue
            to = str(transition.to)
            for s in targets:
                if s == to:
                    continue
                edges.append(Edge(s, to, name, outcome))
                if outcome in ("expired", "give_up") and kind.is_requeue(s, to):
                    edges.append(Edge(s, kind.limit_status, name, "requeue-limit"))
        # Any failure or named outcome may charge a budget: a spent one with its own
        # give-up moves the entity there, whatever the handler declared.
        for budget in kind.budgets:
            if budget.give_up is not None and budget.give_up.to is not None:
                to = str(budget.give_up.to)
                edges.extend(Edge(s, to, name, f"budget:{budget.name}") for s in targets if s != to)
    # What happens outside (a backend's or a peer's report) moves entities without a
    # person: it counts like a handler's move.
    edges.extend(report_edges(kind))
    if include_api:
        edges.extend(api_edges(kind))
    return list(dict.fromkeys(edges))


def parent_edges(
    handlers: Mapping[str, Handler], kind: EntityKind, parent: EntityKind
) -> list[Edge]:
    """Changes of ``kind``'s statuses made by its parent kind's transitions.

    A parent's ``Transition(children=…)`` moves the children behind it
    (:meth:`EntityKind.movable_to`); a transition, promotion or termination
    that ends the parent ends its live children
    (:meth:`EntityKind.end_status_for`). The outcome is labelled
    ``<outcome> (parent)``.
    """
    edges: list[Edge] = []

    def moved(to: str, handler: str, outcome: str) -> None:
        label = f"{outcome} (parent)"
        edges.extend(Edge(s, to, handler, label) for s in sorted(kind.movable_to(to)) if s != to)

    for name, handler in _of_kind(handlers, parent):
        if isinstance(handler, PromotionRule):
            if handler.to_status in parent.terminal:
                moved(kind.end_status_for(handler.to_status), name, "promotion")
            continue
        transitions = type(handler).status_transitions()
        declared = [(o, getattr(transitions, o)) for o in _OUTCOMES]
        declared += sorted(transitions.outcomes.items())
        for outcome, transition in declared:
            if transition is None:
                continue
            if transition.children is not None:
                moved(str(transition.children), name, outcome)
            elif transition.to is not None and transition.to in parent.terminal:
                moved(kind.end_status_for(transition.to), name, outcome)
    for mode, status in (
        (m, s) for m in (None, *sorted(parent.termination_modes)) for s in parent.status_names
    ):
        rule = parent.termination_of(status, has_children=True, mode=mode)
        if rule is not None:
            to = rule.children if rule.children is not None else None
            if to is None and rule.to in parent.terminal:
                to = kind.end_status_for(rule.to)
            if to is not None:
                moved(str(to), "api", "terminate")
    return list(dict.fromkeys(edges))


def _reachable(start: Iterable[str], edges: list[Edge]) -> set[str]:
    seen = set(start)
    frontier = list(seen)
    while frontier:
        current = frontier.pop()
        for edge in edges:
            if edge.source == current and edge.target not in seen:
                seen.add(edge.target)
                frontier.append(edge.target)
    return seen


def check_graph(
    handlers: Mapping[str, Handler],
    kind: EntityKind,
    *,
    parent: EntityKind | None = None,
    kinds: Mapping[str, EntityKind] | None = None,
) -> list[GraphWarning]:
    """Warnings about the whole state machine of ``kind`` built from ``handlers``.

    ``parent`` is ``kind``'s parent kind: the statuses its transitions move
    children to are reachable (:func:`parent_edges`). Without it, the parent is
    looked up by name in ``kinds``, else in the kinds the handlers were loaded
    with (a coordinator's :class:`~drover.coordinator.handlers.LoadedHandlers`,
    what ``CoordinatorHarness.handlers`` is).

    Changes the kind declares ``reported`` (pushed reports) count as edges.

    * a non-terminal status no handler targets (nor a declared report leaves):
      sessions there sit forever;
    * a handler whose ``need_retry`` moves the status: every retry resets its
      tries, so ``max_retries`` can never fire;
    * a non-terminal status from which no path leads to a terminal status;
    * a non-terminal status (other than PENDING, where sessions are created)
      that no transition can reach.
    """
    if parent is None and kind.parent is not None:
        loaded = handlers.kinds if isinstance(handlers, LoadedHandlers) else None
        registered = kinds if kinds is not None else loaded
        if registered is not None and kind.parent in registered:
            parent = registered[kind.parent]
    warnings: list[GraphWarning] = []
    edges = edges_of(handlers, kind=kind)
    handler_edges = edges_of(handlers, include_api=False, kind=kind)
    mine = _of_kind(handlers, kind)
    noun = f"{kind.name}s"
    targeted = {str(s) for _, h in mine for s in target_statuses(h)}
    # A status a declared report leaves is acted on from outside.
    targeted |= {source for source, _ in kind.reported}
    live = [s for s in kind.status_names if s not in kind.terminal and s not in kind.dormant]
    for status in live:
        if status not in targeted and (kind.parent is None or mine):
            warnings.append(
                GraphWarning(
                    "untargeted",
                    status,
                    f"no handler targets {status}: {noun} in it would sit there forever",
                )
            )
    for name, handler in mine:
        if isinstance(handler, PromotionRule):
            continue
        retry = type(handler).status_transitions().need_retry
        if retry is None or retry.to is None:
            continue
        if type(handler).default_options().max_retries is None:
            continue  # no retry limit to defeat (budgets, if any, still count)
        for status in sorted(str(s) for s in target_statuses(handler)):
            if retry.to != status:
                warnings.append(
                    GraphWarning(
                        "retry-moves",
                        status,
                        f"handler {name}: need_retry moves {status} to {retry.to}, which "
                        "resets its tries on every retry, so max_retries can never give up",
                    )
                )
    if kind.parent is not None and not mine:
        # Children moved only by their parent's transitions and their backend.
        return warnings
    for status in live:
        # Only handler moves count here: a termination request needs a person.
        exits = edges if kind.ends_on_request else handler_edges
        if not (_reachable([status], exits) & kind.terminal):
            warnings.append(
                GraphWarning(
                    "no-exit",
                    status,
                    f"no sequence of handler transitions leads from {status} to a terminal "
                    f"status ({', '.join(sorted(kind.terminal))})",
                )
            )
    incoming = {e.target for e in edges}
    if parent is not None:
        incoming |= {e.target for e in parent_edges(handlers, kind, parent)}
    for status in live:
        if status != kind.first_status and status not in incoming:
            warnings.append(
                GraphWarning(
                    "unreachable",
                    status,
                    f"no transition leads to {status}: only {noun} created in it get there",
                )
            )
    return warnings


def _label(edge: Edge) -> str:
    return f"{edge.handler}: {edge.outcome}"


def ordered_edges(edges: Iterable[Edge], kind: EntityKind) -> list[Edge]:
    """Edges in lifecycle order of their source, then target."""
    order = {s: i for i, s in enumerate(kind.status_names)}
    return sorted(
        edges,
        key=lambda e: (order.get(e.source, 99), order.get(e.target, 99), e.handler, e.outcome),
    )


def render_text(edges: Iterable[Edge], kind: EntityKind) -> str:
    """One line per edge: ``PENDING -> SCHEDULED  [schedule-sessions: success]``."""
    return "\n".join(
        f"{e.source:<11} -> {e.target:<11}  [{_label(e)}]" for e in ordered_edges(edges, kind)
    )


def render_mermaid(edges: Iterable[Edge], kind: EntityKind) -> str:
    """A Mermaid ``stateDiagram-v2``; ``#58;`` stands for the colon inside labels."""
    lines = ["stateDiagram-v2", f"    [*] --> {kind.first_status}"]
    for e in ordered_edges(edges, kind):
        lines.append(f"    {e.source} --> {e.target} : {e.handler}#58; {e.outcome}")
    for status in sorted(kind.terminal):
        lines.append(f"    {status} --> [*]")
    return "\n".join(lines)


def _escaped(text: str) -> str:
    """``text`` inside a DOT double-quoted string."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def render_dot(
    edges: Iterable[Edge],
    kind: EntityKind,
    *,
    grouped: bool = False,
    colours: Mapping[str, tuple[str, str]] | None = None,
    rankdir: str = "LR",
) -> str:
    """A Graphviz ``digraph`` of every status of ``kind`` and ``edges``.

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
    for status in kind.status_names:
        attributes = [f'id="status-{status}"']
        if status in kind.terminal:
            attributes.append("peripheries=2")
        if colours and status in colours:
            fill, text = colours[status]
            attributes += [f'fillcolor="{fill}"', f'fontcolor="{text}"']
        lines.append(f'    "{status}" [{", ".join(attributes)}];')
    ordered = ordered_edges(edges, kind)
    if grouped:
        pairs: dict[tuple[str, str], dict[str, list[str]]] = {}
        for e in ordered:
            pairs.setdefault((e.source, e.target), {}).setdefault(e.handler, []).append(e.outcome)
        for (source, target), handlers in pairs.items():
            # The DOT escape \\n (a backslash and n) breaks the label: a line per handler.
            label = "\\n".join(
                _escaped(f"{h}: {', '.join(o)}") for h, o in sorted(handlers.items())
            )
            lines.append(f'    "{source}" -> "{target}" [label="{label}"];')
    else:
        for e in ordered:
            lines.append(f'    "{e.source}" -> "{e.target}" [label="{_escaped(_label(e))}"];')
    lines.append("}")
    return "\n".join(lines)
