"""The one colour per status used everywhere on the dashboard (badges, graph boxes).

Colour is never the only carrier of meaning: every badge and box shows the
status name too.
"""

from __future__ import annotations

from drover.kinds import BUILTIN_KINDS

__all__ = ["STATUS_COLOURS", "badge_css", "colour_of"]

#: status name -> (background, text colour). Kernel-only statuses share a
#: session status's colour (PULLING is a kind of PREPARING).
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
    # Deployments and routes: the same meanings, the same colours.
    "CREATED": ("#f59e0b", "#1f1300"),  # amber, as PENDING
    "SCALING": ("#7e22ce", "#ffffff"),  # purple: being prepared
    "DEPLOYING": ("#4338ca", "#ffffff"),  # indigo
    "READY": ("#1d4ed8", "#ffffff"),  # blue: serving
    "DESTROYING": ("#475569", "#ffffff"),  # slate: ending
    "DESTROYED": ("#15803d", "#ffffff"),  # green: ended
    "PROVISIONING": ("#ea580c", "#ffffff"),  # orange
    "DEGRADED": ("#ca8a04", "#1f1300"),  # yellow: not answering yet
    "HEALTHY": ("#1d4ed8", "#ffffff"),  # blue: serving
    "UNHEALTHY": ("#b91c1c", "#ffffff"),  # red
    "FAILED_TO_START": ("#7f1d1d", "#ffffff"),  # dark red
}

assert set(STATUS_COLOURS) >= {s for kind in BUILTIN_KINDS for s in kind.status_names}

_FALLBACK = ("#e5e7eb", "#111827")


def colour_of(status: str) -> tuple[str, str]:
    """(background, text) for a status name; a neutral grey for anything unknown."""
    return STATUS_COLOURS.get(str(status), _FALLBACK)


def badge_css() -> str:
    """One ``.badge-<STATUS>`` rule per status, from :data:`STATUS_COLOURS`."""
    return "\n".join(
        f".badge-{name} {{ background: {bg}; color: {fg}; }}"
        for name, (bg, fg) in STATUS_COLOURS.items()
    )
