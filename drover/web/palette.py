"""The one colour per status used everywhere on the dashboard (badges, graph boxes).

drover's own are the session and kernel statuses the dashboard's own pages
show; a kind package gives its statuses theirs through ``drover_register_web``
(``register.colours(...)``), as drover's deployments do. Colour is never the
only carrier of meaning: every badge and box shows the status name too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from drover.model.errors import InvalidHandlerError
from drover.plugins.registry import Registered, StatusColour

__all__ = ["STATUS_COLOURS", "badge_css", "colour_of", "with_plugin_colours"]

#: status name -> (background, text colour): the session and kernel statuses. Kernel-only
#: statuses share a session status's colour (PULLING is a kind of PREPARING).
STATUS_COLOURS: dict[str, tuple[str, str]] = {
    "PENDING": ("#f59e0b", "#1f1300"),  # amber
    "SCHEDULED": ("#ea580c", "#ffffff"),  # orange
    "PREPARING": ("#7e22ce", "#ffffff"),  # purple
    "PULLING": ("#7e22ce", "#ffffff"),  # purple
    "PREPARED": ("#4338ca", "#ffffff"),  # indigo
    "CREATING": ("#4338ca", "#ffffff"),  # indigo
    "RUNNING": ("#1d4ed8", "#ffffff"),  # blue
    "TERMINATING": ("#475569", "#ffffff"),  # slate
    "TERMINATED": ("#15803d", "#ffffff"),  # green
    "CANCELLED": ("#6b7280", "#ffffff"),  # grey
    "ERROR": ("#b91c1c", "#ffffff"),  # red
}

_FALLBACK = ("#e5e7eb", "#111827")


def with_plugin_colours(found: Iterable[Registered[StatusColour]]) -> dict[str, tuple[str, str]]:
    """drover's colours, then those the plugins gave their statuses (in plugin order).

    Raises InvalidHandlerError for a status given a colour other than the one
    drover or an earlier plugin gave it.
    """
    colours = dict(STATUS_COLOURS)
    owners = dict.fromkeys(STATUS_COLOURS, "drover")
    for entry in found:
        given = entry.item
        pair = (given.background, given.text)
        if colours.setdefault(given.status, pair) != pair:
            raise InvalidHandlerError(
                f"plugin {entry.plugin!r} gives status {given.status!r} the colours {pair}; "
                f"{owners[given.status]!r} gave it {colours[given.status]}"
            )
        owners.setdefault(given.status, entry.plugin)
    return colours


def colour_of(
    status: str, colours: Mapping[str, tuple[str, str]] = STATUS_COLOURS
) -> tuple[str, str]:
    """(background, text) for a status name; a neutral grey for anything unknown."""
    return colours.get(str(status), _FALLBACK)


def badge_css(colours: Mapping[str, tuple[str, str]] = STATUS_COLOURS) -> str:
    """One ``.badge-<STATUS>`` rule per status of ``colours``."""
    return "\n".join(
        f".badge-{name} {{ background: {bg}; color: {fg}; }}" for name, (bg, fg) in colours.items()
    )
