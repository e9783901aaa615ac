"""A small, deterministic SVG renderer for the session state graph.

Statuses are labelled boxes in lifecycle order: the main line (PENDING …
TERMINATED) left to right, the other terminal statuses (CANCELLED, ERROR) on
a row below. Edges between the same two statuses are drawn as one arrow
labelled with every ``handler: outcome`` that makes that change. Forward
moves that skip statuses arc below the main line, backward moves arc above
it. The output depends only on the edges (sorted), never on dict order or
randomness, and needs no external binary.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from xml.sax.saxutils import escape

from drover.coordinator.status import SessionStatus
from drover.plugins.graph import Edge
from drover.web.palette import colour_of

__all__ = ["render_svg"]

_MAIN = [
    SessionStatus.PENDING,
    SessionStatus.SCHEDULED,
    SessionStatus.PREPARING,
    SessionStatus.PREPARED,
    SessionStatus.CREATING,
    SessionStatus.RUNNING,
    SessionStatus.TERMINATING,
    SessionStatus.TERMINATED,
]
_LOWER = {SessionStatus.CANCELLED: 0, SessionStatus.ERROR: len(_MAIN) - 1}

_W, _H = 132, 40  # box size
_PITCH = 196  # column pitch
_MARGIN = 24
_LINE = 13  # label line height
_LOWER_GAP = 260  # from the main row's top to the lower row's top


def _arc_depth(columns: int) -> float:
    """How far (control point offset) an arc spanning ``columns`` bends."""
    return 36.0 + 34.0 * columns


def _labels(edges: Iterable[Edge]) -> list[str]:
    by_handler: dict[str, list[str]] = defaultdict(list)
    for edge in edges:
        if edge.outcome not in by_handler[edge.handler]:
            by_handler[edge.handler].append(edge.outcome)
    return [f"{h}: {', '.join(sorted(o))}" for h, o in sorted(by_handler.items())]


def _text(x: float, y: float, lines: list[str], *, anchor: str = "middle") -> str:
    spans = "".join(
        f'<tspan x="{x:.1f}" dy="{0 if i == 0 else _LINE}">{escape(line)}</tspan>'
        for i, line in enumerate(lines)
    )
    return f'<text class="edge-label" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}">{spans}</text>'


def render_svg(edges: Iterable[Edge]) -> str:
    """The state graph of ``edges`` as a standalone ``<svg>`` element."""
    groups: dict[tuple[SessionStatus, SessionStatus], list[Edge]] = defaultdict(list)
    for edge in sorted(edges, key=lambda e: (e.source, e.target, e.handler, e.outcome)):
        groups[(edge.source, edge.target)].append(edge)
    column = {s: i for i, s in enumerate(_MAIN)}
    for status, col in _LOWER.items():
        column[status] = col
    # Room above the main row for the deepest backward arc and its label.
    up = [
        _arc_depth(column[a] - column[b]) / 2 + _LINE * len(_labels(g))
        for (a, b), g in groups.items()
        if a in _MAIN and b in _MAIN and column[b] < column[a]
    ]
    top = _MARGIN + max(up, default=0.0) + _LINE
    lower_top = top + _LOWER_GAP
    width = _MARGIN * 2 + _PITCH * (len(_MAIN) - 1) + _W
    height = lower_top + _H + _MARGIN

    def box(status: SessionStatus) -> tuple[float, float]:
        """Top-left corner of a status's box."""
        x = _MARGIN + _PITCH * column[status]
        return float(x), (top if status in _MAIN else lower_top)

    parts: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="state-graph" '
        f'viewBox="0 0 {width} {height:.0f}" width="{width}" height="{height:.0f}" '
        f'role="img" aria-label="session state graph">',
        "<defs>"
        '<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#334155"/></marker>'
        "</defs>",
        "<style>"
        ".edge { fill: none; stroke: #334155; stroke-width: 1.4; }"
        ".edge-label { font: 11px sans-serif; fill: #0f172a; paint-order: stroke; "
        "stroke: #ffffff; stroke-width: 3px; }"
        ".node-label { font: bold 13px sans-serif; }"
        "</style>",
    ]
    for (source, target), group in groups.items():
        sx, sy = box(source)
        tx, ty = box(target)
        labels = _labels(group)
        dc = column[target] - column[source]
        same_row = (source in _MAIN) == (target in _MAIN)
        title = escape(f"{source} → {target}: " + "; ".join(labels))
        if same_row and dc == 1:
            x1, y1 = sx + _W, sy + _H / 2
            x2, y2 = tx, ty + _H / 2
            path = f"M {x1:.1f} {y1:.1f} L {x2:.1f} {y2:.1f}"
            lx, ly = (x1 + x2) / 2, y1 - 8 - _LINE * (len(labels) - 1)
        elif (same_row and dc == -1) or (same_row and dc < 0):
            # backward: arc above
            x1, y1 = sx + _W / 2 - 10, sy
            x2, y2 = tx + _W / 2 + 10, ty
            depth = _arc_depth(abs(dc))
            cx, cy = (x1 + x2) / 2, y1 - depth
            path = f"M {x1:.1f} {y1:.1f} Q {cx:.1f} {cy:.1f} {x2:.1f} {y2:.1f}"
            lx, ly = cx, y1 - depth / 2 - 4 - _LINE * (len(labels) - 1)
        elif same_row:
            # forward, skipping statuses: arc below
            x1, y1 = sx + _W / 2 + 10, sy + _H
            x2, y2 = tx + _W / 2 - 10, ty + _H
            depth = _arc_depth(abs(dc))
            cx, cy = (x1 + x2) / 2, y1 + depth
            path = f"M {x1:.1f} {y1:.1f} Q {cx:.1f} {cy:.1f} {x2:.1f} {y2:.1f}"
            lx, ly = cx, y1 + depth / 2 + _LINE
        else:
            # between the rows: a straight line from bottom to top (or back)
            down = source in _MAIN
            x1 = sx + _W / 2 + (12 if down else -12)
            x2 = tx + _W / 2 + (12 if down else -12)
            y1 = sy + _H if down else sy
            y2 = ty if down else ty + _H
            path = f"M {x1:.1f} {y1:.1f} L {x2:.1f} {y2:.1f}"
            lx, ly = (x1 + x2) / 2 + 6, (y1 + y2) / 2 + 30
            parts.append(
                f'<g class="edge-group"><title>{title}</title>'
                f'<path class="edge" d="{path}" marker-end="url(#arrow)"/>'
                f"{_text(lx, ly, labels, anchor='start')}</g>"
            )
            continue
        parts.append(
            f'<g class="edge-group"><title>{title}</title>'
            f'<path class="edge" d="{path}" marker-end="url(#arrow)"/>'
            f"{_text(lx, ly, labels)}</g>"
        )
    for status in [*_MAIN, *_LOWER]:
        x, y = box(status)
        bg, fg = colour_of(status)
        parts.append(
            f'<g class="node" data-status="{status}">'
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{_W}" height="{_H}" rx="6" '
            f'fill="{bg}" stroke="#0f172a" stroke-width="1"/>'
            f'<text class="node-label" x="{x + _W / 2:.1f}" y="{y + _H / 2 + 5:.1f}" '
            f'text-anchor="middle" fill="{fg}">{status}</text></g>'
        )
    parts.append("</svg>")
    return "\n".join(parts)
