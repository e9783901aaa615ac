"""The session state graph as SVG, laid out by Graphviz on the server.

The DOT text comes from :func:`drover.plugins.graph.render_dot` (the one
place it is written); ``dot -Tsvg`` (Debian's ``graphviz``, installed by
``make system-deps``) lays it out, so labels sit beside their arrows instead
of across them. ``dot`` runs in a worker thread, never blocking the event
loop, and the SVG is inlined into the page: no CDN, no script.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping

from drover.model.errors import DroverError
from drover.model.kinds import EntityKind
from drover.plugins.graph import Edge, render_dot
from drover.web.palette import STATUS_COLOURS

__all__ = ["GraphvizError", "dot_source", "render_svg"]

#: Seconds ``dot`` may take before the page gives up on it.
DOT_TIMEOUT = 30.0

_PROLOGUE = re.compile(r"\A.*?(?=<svg\b)", re.DOTALL)
_COMMENT = re.compile(r"<!--.*?-->\s*", re.DOTALL)


class GraphvizError(DroverError):
    """``dot`` is missing or failed; the message says which and what to do."""


def dot_source(
    edges: Iterable[Edge],
    kind: EntityKind,
    colours: Mapping[str, tuple[str, str]] = STATUS_COLOURS,
) -> str:
    """The DOT text the dashboard lays out: one labelled arrow per pair of statuses, each
    status in its ``colours``."""
    return render_dot(edges, kind, grouped=True, colours=colours, rankdir="TB")


def _run_dot(source: str) -> str:
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizError(
            "Graphviz is not installed (no `dot` on the PATH): run `make system-deps`, "
            "or apt-get install graphviz"
        )
    try:
        done = subprocess.run(
            [exe, "-Tsvg"],
            input=source.encode(),
            capture_output=True,
            timeout=DOT_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise GraphvizError(f"dot did not finish within {DOT_TIMEOUT:g} s") from None
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip().splitlines()
        raise GraphvizError(f"dot failed (exit {done.returncode}): {' '.join(detail[:2])}")
    return done.stdout.decode()


def _inline(svg: str, kind: str) -> str:
    """``dot``'s document as an element to put inside a page: no XML prologue, no comments."""
    svg = _COMMENT.sub("", _PROLOGUE.sub("", svg, count=1))
    # dot writes every hyphen as a character reference; plain ones read (and search) better.
    svg = svg.replace("&#45;", "-")
    return svg.replace(
        "<svg ", f'<svg class="state-graph" role="img" aria-label="{kind} state graph" ', 1
    ).strip()


async def render_svg(
    edges: Iterable[Edge],
    kind: EntityKind,
    colours: Mapping[str, tuple[str, str]] = STATUS_COLOURS,
) -> str:
    """The state graph of ``edges`` (of ``kind``) as an ``<svg>`` element, laid out by Graphviz.

    Raises :class:`GraphvizError` when ``dot`` is missing or fails.
    """
    source = dot_source(edges, kind, colours)
    return _inline(await asyncio.to_thread(_run_dot, source), kind.name)
