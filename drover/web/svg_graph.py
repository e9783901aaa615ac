"""A small, deterministic SVG renderer for the session state graph.

Statuses are labelled boxes in one column, in lifecycle order (PENDING at the
top, then on to TERMINATED, CANCELLED and ERROR). Edges between the same two
statuses are drawn as one arrow labelled with every ``handler: outcome`` that
makes that change: a move to the next status is a short arrow down, a forward
move that skips statuses arcs out to the right, a move back arcs out to the
left (farther for longer moves). The output depends only on the set of edges,
never on their order, and needs no external binary.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from xml.sax.saxutils import escape

from drover.model.kinds import SESSION, EntityKind
from drover.plugins.graph import Edge
from drover.web.palette import colour_of

__all__ = ["render_svg"]


_W, _H = 150, 36  # box size
_PITCH = 78  # row pitch
_MARGIN = 16
_LINE = 13  # label line height
_CHAR = 6.3  # estimated label character width (11px sans-serif)


def _bulge(rows: int) -> float:
    """How far out an arc spanning ``rows`` rows reaches (its apex, from the box edge)."""
    return 14.0 + 34.0 * rows


def _labels(edges: Iterable[Edge]) -> list[str]:
    by_handler: dict[str, set[str]] = defaultdict(set)
    for edge in edges:
        by_handler[edge.handler].add(edge.outcome)
    return [f"{h}: {', '.join(sorted(o))}" for h, o in sorted(by_handler.items())]


def _text(x: float, y: float, lines: list[str], anchor: str) -> str:
    """Lines of text vertically centred on ``y``."""
    first = y - _LINE * (len(lines) - 1) / 2 + 4
    spans = "".join(
        f'<tspan x="{x:.1f}" dy="{0 if i == 0 else _LINE}">{escape(line)}</tspan>'
        for i, line in enumerate(lines)
    )
    return (
        f'<text class="edge-label" x="{x:.1f}" y="{first:.1f}" '
        f'text-anchor="{anchor}">{spans}</text>'
    )


def _width(lines: list[str]) -> float:
    return max((len(line) for line in lines), default=0) * _CHAR


class _Placer:
    """Moves each label up or down, as little as needed, off the labels placed before it."""

    def __init__(self) -> None:
        self.boxes: list[tuple[float, float, float, float]] = []

    def place(self, x: float, y: float, lines: list[str], anchor: str) -> float:
        w, h = _width(lines), _LINE * len(lines)
        x1 = x - w if anchor == "end" else x
        for step in range(60):
            dy = (step + 1) // 2 * 4.0 * (1 if step % 2 else -1)
            y1 = y + dy - h / 2
            if not any(
                x1 < bx2 and bx1 < x1 + w and y1 < by2 and by1 < y1 + h
                for bx1, bx2, by1, by2 in self.boxes
            ):
                break
        self.boxes.append((x1, x1 + w, y1, y1 + h))
        return y1 + h / 2


def render_svg(edges: Iterable[Edge], kind: EntityKind = SESSION) -> str:
    """The state graph of ``edges`` (of ``kind``) as a standalone ``<svg>`` element."""
    base = list(kind.status_names)
    groups: dict[tuple[str, str], list[Edge]] = defaultdict(list)
    for edge in sorted(set(edges), key=lambda e: (e.source, e.target, e.handler, e.outcome)):
        groups[(edge.source, edge.target)].append(edge)
    order = base + sorted({s for pair in groups for s in pair if s not in base}, key=str)
    row = {s: i for i, s in enumerate(order)}
    # Space left of the column for backward arcs, right of it for forward ones.
    left = right = _W / 2.0
    for (a, b), group in groups.items():
        span = row[b] - row[a]
        reach = _bulge(abs(span)) / 2 + 8 + _width(_labels(group))
        if span < 0:
            left = max(left, reach)
        elif span > 1:
            right = max(right, reach)
        else:
            right = max(right, _W / 2 + 10 + _width(_labels(group)) - _W / 2)
    x0 = _MARGIN + left
    width = x0 + _W + right + _MARGIN
    height = _MARGIN * 2 + _PITCH * (len(order) - 1) + _H

    def top(status: str) -> float:
        return _MARGIN + _PITCH * row[status]

    parts: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="state-graph" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" height="{height:.0f}" '
        f'role="img" aria-label="{kind.name} state graph">',
        "<defs>"
        '<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#334155"/></marker>'
        "</defs>",
        "<style>"
        ".edge { fill: none; stroke: #334155; stroke-width: 1.3; }"
        ".edge-label { font: 11px sans-serif; fill: #0f172a; paint-order: stroke; "
        "stroke: #ffffff; stroke-width: 3px; stroke-linejoin: round; }"
        ".node-label { font: bold 13px sans-serif; }"
        "</style>",
    ]
    centre = x0 + _W / 2
    placer = _Placer()
    for (source, target), group in groups.items():
        labels = _labels(group)
        span = row[target] - row[source]
        title = escape(f"{source} → {target}: " + "; ".join(labels))
        ys, yt = top(source), top(target)
        if span == 1:
            path = f"M {centre:.1f} {ys + _H:.1f} L {centre:.1f} {yt:.1f}"
            ly = placer.place(centre + 10, (ys + _H + yt) / 2, labels, "start")
            label = _text(centre + 10, ly, labels, "start")
        else:
            backward = span < 0
            edge_x = x0 if backward else x0 + _W
            sign = -1 if backward else 1
            bulge = _bulge(abs(span))
            # leave and enter a little off the boxes' middles, so arcs fan out
            y1 = ys + _H / 2 + (-6 if backward else 6)
            y2 = yt + _H / 2 + (6 if backward else -6)
            cx, cy = edge_x + sign * bulge, (y1 + y2) / 2
            path = f"M {edge_x:.1f} {y1:.1f} Q {cx:.1f} {cy:.1f} {edge_x:.1f} {y2:.1f}"
            apex = edge_x + sign * (bulge / 2 + 6)
            anchor = "end" if backward else "start"
            label = _text(apex, placer.place(apex, cy, labels, anchor), labels, anchor)
        parts.append(
            f'<g class="edge-group"><title>{title}</title>'
            f'<path class="edge" d="{path}" marker-end="url(#arrow)"/>{label}</g>'
        )
    for status in order:
        y = top(status)
        bg, fg = colour_of(status)
        parts.append(
            f'<g class="node" data-status="{status}">'
            f'<rect x="{x0:.1f}" y="{y:.1f}" width="{_W}" height="{_H}" rx="6" '
            f'fill="{bg}" stroke="#0f172a" stroke-width="1"/>'
            f'<text class="node-label" x="{centre:.1f}" y="{y + _H / 2 + 5:.1f}" '
            f'text-anchor="middle" fill="{fg}">{status}</text></g>'
        )
    parts.append("</svg>")
    return "\n".join(parts)
