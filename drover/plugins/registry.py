"""The ``register`` callables handed to register hooks, and what they collect.

One generic :class:`Registry` serves every hook. The hook is called by keyword
through pluggy (``pm.hook.drover_register_handlers(register=registry)``), so
hook wrappers and pluggy's tracing see every call; each registration is still
attributed to the plugin whose hook implementation made it, by finding that
implementation's frame on the stack, so that errors can name the plugin.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs
import pluggy

from drover.coordinator.handlers import (
    Handler,
    LifecycleHandler,
    SessionPromotionHandler,
    handler_name,
    rule_of,
)
from drover.coordinator.observers import Observer
from drover.model.deprecation import warn_moved
from drover.model.errors import DroverError, InvalidHandlerError
from drover.model.kinds import EntityKind
from drover.model.promotion import PromotionRule
from drover.plugins.validation import validate_promotion_handler

if TYPE_CHECKING:
    from drover.backends.base import AgentBackend, KernelReporter
    from drover.config import Config
    from drover.kinds.sessions.store import Queries, Repository
    from drover.model.clock import Clock

__all__ = [
    "BackendFactory",
    "BackendRegistry",
    "HandlerRegistry",
    "KindRegistry",
    "ObserverRegistry",
    "Registered",
    "RegisteredHandler",
    "Registry",
    "RuntimeContext",
    "StatusColour",
    "WebRegistry",
    "WebRoute",
    "accept_backend",
    "accept_handlers",
    "accept_kinds",
    "accept_observers",
]

T = TypeVar("T")

#: ``factory(config) -> AgentBackend``.
BackendFactory = Callable[["Config"], "AgentBackend"]


@attrs.frozen
class RuntimeContext:
    """Services a handler may need: where kernels run, read-only storage, and the clock.

    ``queries`` cannot write: a handler changes the world only through its
    result (statuses, ``create``, ``data``, ``terminate``), applied by the
    coordinator in one transaction with its outcome.
    """

    queries: Queries
    backend: AgentBackend
    clock: Clock
    #: Pushed reports (``reporter.report(entity_id, status, expected=…)``) for a plugin's
    #: outside events: a webhook or heartbeat listener it runs. Never from ``execute``:
    #: a handler changes the world only through its result.
    reporter: KernelReporter | None = None
    #: Each handler's own settings, ``[handlers.<name>.settings]``, by handler name.
    settings: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)

    #: Entities one tick may create (limits.creations_per_tick): a handler that
    #: creates many (a deployment scaling up) creates at most this many per tick.
    creations_per_tick: int = 1000

    @property
    def repository(self) -> Repository:
        """Deprecated (it went during 0.1, is back in 0.2 and goes in 0.3): ``queries`` to
        read, ``reporter`` for pushed reports.

        It is the repository drover reads and reports through: the ``reporter``
        of a context drover builds, or ``queries`` when an older caller passed
        a repository there (``RuntimeContext(repository, backend, clock)``).
        """
        warn_moved(
            "RuntimeContext.repository",
            "RuntimeContext.queries to read, RuntimeContext.reporter to report",
        )
        # Imported on use only: importing drover.plugins imports no lifecycle.
        from drover.kinds.sessions.store import Repository

        for candidate in (self.reporter, self.queries):
            if isinstance(candidate, Repository):
                return candidate
        raise AttributeError(
            "this RuntimeContext has no repository: read through its queries and report "
            "through its reporter"
        )

    def settings_for(self, handler: str) -> Mapping[str, Any]:
        """The settings of ``[handlers.<handler>.settings]``; empty if none were given.

        A plugin reads them when it registers its handler, and checks them
        itself: raising there stops the daemon at start-up with the message.
        """
        return self.settings.get(handler, {})


@attrs.frozen
class Registered(Generic[T]):
    """One registered thing and the plugin that registered it."""

    item: T
    plugin: str


@attrs.frozen
class RegisteredHandler:
    """A handler (or promotion rule) as registered, and the plugin that registered it.

    ``original`` is what the plugin passed (a SessionPromotionHandler is kept
    here; ``handler`` is then its rule).
    """

    handler: Handler
    plugin: str
    original: object

    @property
    def name(self) -> str:
        """The handler's (or rule's) name."""
        return handler_name(self.handler)


@attrs.frozen
class WebRoute:
    """A dashboard page or JSON endpoint a plugin registered (``register.route(...)``).

    ``endpoint`` is a Starlette endpoint: ``async def endpoint(request) -> Response``.
    ``nav``, if set, is the label of a link to ``path`` in the dashboard's top navigation.
    ``page_of``, if set, names the kind this page shows one entity of: its path's one
    parameter takes the entity's id, and other pages link entities of that kind to it.
    """

    path: str
    endpoint: Callable[..., Any]
    name: str | None = None
    nav: str | None = None
    page_of: str | None = None


@attrs.frozen
class StatusColour:
    """The colours a plugin gives a status on the dashboard (``register.colours(...)``):
    its badges' and its state-graph boxes' ``background`` and ``text``, as ``#rrggbb``."""

    status: str
    background: str
    text: str


# What a status name and a colour may be: they are written into CSS and into DOT.
_STATUS_NAME = re.compile(r"[A-Za-z0-9_-]+")
_COLOUR = re.compile(r"#[0-9a-fA-F]{6}")


#: ``accept(plugin, *args, **kwargs)`` checks one call of ``register`` and returns its items.
Accept = Callable[..., Sequence[T]]


class Registry(Generic[T]):
    """The ``register`` callable of one hook; ``context`` is what the hook may use."""

    def __init__(
        self, pm: pluggy.PluginManager, hook: str, accept: Accept[T], context: Any = None
    ) -> None:
        self.context = context
        self.hook = hook
        self._accept = accept
        self._pm = pm
        self._entries: list[Registered[T]] = []
        # code object -> [(the instance a method is bound to, or None; plugin name)]:
        # instances of one plugin class share their methods' code.
        self._codes: dict[object, list[tuple[object, str]]] = {}
        for impl in getattr(pm.hook, hook).get_hookimpls():
            code = getattr(impl.function, "__code__", None)
            bound = getattr(impl.function, "__self__", None)
            self._codes.setdefault(code, []).append((bound, impl.plugin_name))

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        """Register what the hook's documentation says (``register(handler, …)``, …)."""
        plugin = self._calling_plugin(sys._getframe(1))
        for item in self._accept(plugin, *args, **kwargs):
            self._entries.append(Registered(item, plugin))

    def _calling_plugin(self, frame: FrameType | None) -> str:
        while frame is not None:
            for bound, name in self._codes.get(frame.f_code, ()):
                if bound is None or frame.f_locals.get("self") is bound:
                    return name
            frame = frame.f_back
        return "?"

    def call_hook(self) -> Registry[T]:
        """Call every plugin's implementation of the hook, by keyword, through pluggy.

        pluggy calls the newest plugin first; the entries are then put back in
        the order the plugins were registered (the built-in lifecycle first),
        keeping each plugin's own order.
        """
        caller = getattr(self._pm.hook, self.hook)
        try:
            caller(register=self)
        except DroverError:
            raise
        except Exception as error:
            if _refused_here(error):
                raise  # register's own refusal (a class, not an instance…): its own words
            # A plugin refusing its own settings (say a ValueError from its check of
            # [handlers.<name>.settings]) is a configuration error: one line naming the
            # plugin and saying what it said, not a traceback through pluggy.
            plugin = _raised_by(caller, error)
            raise InvalidHandlerError(
                f"plugin {plugin!r} could not register ({self.hook}): "
                f"{type(error).__name__}: {error}".splitlines()[0]
            ) from error
        order = {name: i for i, (name, _plugin) in enumerate(self._pm.list_name_plugin())}
        self._entries.sort(key=lambda entry: order.get(entry.plugin, len(order)))
        return self

    @property
    def entries(self) -> list[Registered[T]]:
        """Everything registered, in order."""
        return list(self._entries)

    def __iter__(self) -> Iterator[Registered[T]]:
        return iter(self._entries)


def _refused_here(error: BaseException) -> bool:
    """Whether ``error`` was raised by ``register`` itself (this module), not by a plugin."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_filename == __file__


def _raised_by(caller: Any, error: BaseException) -> str:
    """The name of the plugin whose implementation of ``caller``'s hook raised ``error``."""
    codes = set()
    tb = error.__traceback__
    while tb is not None:
        codes.add(tb.tb_frame.f_code)
        tb = tb.tb_next
    for impl in caller.get_hookimpls():
        if getattr(impl.function, "__code__", None) in codes:
            return str(impl.plugin_name)
    return "?"


class WebRegistry(Registry[WebRoute | Path | StatusColour]):
    """``register`` of ``drover_register_web``: ``.route(...)``, ``.templates(...)`` and
    ``.colours(...)``.

    It collects :class:`WebRoute`\\ s (pages and JSON endpoints), template
    directories (:class:`~pathlib.Path`) and :class:`StatusColour`\\ s, each
    attributed to the plugin that
    registered it. The dashboard (:func:`drover.web.create_app`) serves the
    routes after its own, behind the same Host check, token gate and headers.
    """

    def __init__(self, pm: pluggy.PluginManager) -> None:
        super().__init__(pm, "drover_register_web", _accept_nothing)

    def route(
        self,
        path: str,
        endpoint: Callable[..., Any],
        *,
        name: str | None = None,
        nav: str | None = None,
        page_of: str | None = None,
    ) -> None:
        """Serve ``endpoint`` (``async def endpoint(request) -> Response``) at ``path``.

        ``path`` is a Starlette path (``/things/{name}``); ``name`` names the
        route; ``nav`` adds a link labelled so to the top navigation (only for
        a path without parameters); ``page_of`` says the page shows one entity
        of that kind, its path's one parameter being the entity's id (then
        other pages, a session's linked entities for one, link to it).
        """
        plugin = self._calling_plugin(sys._getframe(1))
        if not isinstance(path, str) or not path.startswith("/"):
            raise TypeError(f"plugin {plugin!r}: a route's path must start with '/': {path!r}")
        if not callable(endpoint):
            raise TypeError(f"plugin {plugin!r}: the endpoint of route {path!r} is not callable")
        if nav is not None and (not isinstance(nav, str) or not nav or "{" in path):
            raise TypeError(
                f"plugin {plugin!r}: route {path!r}: nav must be a non-empty label, "
                "on a path without parameters"
            )
        if page_of is not None and path.count("{") != 1:
            raise TypeError(
                f"plugin {plugin!r}: route {path!r}: page_of needs a path with one parameter"
            )
        self._entries.append(Registered(WebRoute(path, endpoint, name, nav, page_of), plugin))

    def templates(self, directory: str | Path) -> None:
        """Add a Jinja2 template directory, searched after drover's own.

        Its templates may extend ``base.html`` and import ``_macros.html``.
        """
        plugin = self._calling_plugin(sys._getframe(1))
        found = Path(directory)
        if not found.is_dir():
            raise TypeError(f"plugin {plugin!r}: no template directory {str(found)!r}")
        self._entries.append(Registered(found, plugin))

    @property
    def routes(self) -> list[Registered[WebRoute]]:
        """The registered routes, in order, with their plugins."""
        return [Registered(e.item, e.plugin) for e in self if isinstance(e.item, WebRoute)]

    def colours(self, colours: Mapping[str, tuple[str, str]]) -> None:
        """Give statuses their dashboard colours: ``{status: (background, text)}``, ``#rrggbb``.

        A kind's statuses are shown in these colours (badges, state-graph boxes);
        a status without one is grey. A status has one colour on the whole
        dashboard: giving one that drover or another plugin gave differently is
        an error when the dashboard starts.
        """
        plugin = self._calling_plugin(sys._getframe(1))
        if not isinstance(colours, Mapping):
            raise TypeError(f"plugin {plugin!r}: colours must be a mapping, got {colours!r}")
        for status, pair in colours.items():
            if not isinstance(status, str) or not _STATUS_NAME.fullmatch(status):
                raise TypeError(
                    f"plugin {plugin!r}: {status!r} is not a status name "
                    "(letters, digits, '_' and '-')"
                )
            if (
                not isinstance(pair, tuple)
                or len(pair) != 2
                or not all(isinstance(c, str) and _COLOUR.fullmatch(c) for c in pair)
            ):
                raise TypeError(
                    f"plugin {plugin!r}: the colours of {status!r} must be a pair "
                    f"(background, text) of '#rrggbb', got {pair!r}"
                )
            self._entries.append(Registered(StatusColour(status, *pair), plugin))

    @property
    def template_dirs(self) -> list[Path]:
        """The registered template directories, in order."""
        return [e.item for e in self if isinstance(e.item, Path)]

    @property
    def status_colours(self) -> list[Registered[StatusColour]]:
        """The registered status colours, in order, with their plugins."""
        return [Registered(e.item, e.plugin) for e in self if isinstance(e.item, StatusColour)]


def _accept_nothing(plugin: str, *args: Any, **kwargs: Any) -> list[WebRoute | Path | StatusColour]:
    raise TypeError(
        f"plugin {plugin!r}: call register.route(path, endpoint, ...), "
        "register.templates(directory) or register.colours({status: (background, text)}) "
        "in drover_register_web"
    )


HandlerRegistry = Registry[RegisteredHandler]
"""``register`` of ``drover_register_handlers``; ``register.context``: a RuntimeContext."""
BackendRegistry = Registry[tuple[str, BackendFactory]]
"""``register`` of ``drover_register_backends``: ``register(name, factory)``."""
KindRegistry = Registry[EntityKind]
"""``register`` of ``drover_register_kinds``: ``register(EntityKind(...), …)``."""
ObserverRegistry = Registry[Observer]
"""``register`` of ``drover_register_observers``: ``register(observer, …)``."""


def accept_handlers(plugin: str, *handlers: Any) -> list[RegisteredHandler]:
    """``register(handler, …)``: lifecycle handlers, promotion rules, promotion handlers."""
    out: list[RegisteredHandler] = []
    for handler in handlers:
        if isinstance(handler, type):
            raise TypeError(
                f"plugin {plugin!r} registered the class {handler.__name__}; "
                "register an instance, e.g. register(MyHandler())"
            )
        if isinstance(handler, LifecycleHandler | PromotionRule):
            out.append(RegisteredHandler(handler, plugin, handler))
        elif isinstance(handler, SessionPromotionHandler):
            validate_promotion_handler(handler, plugin)
            out.append(RegisteredHandler(rule_of(handler), plugin, handler))
        else:
            raise TypeError(
                f"plugin {plugin!r} registered {handler!r}, which is neither a LifecycleHandler, "
                "a PromotionRule nor a SessionPromotionHandler"
            )
    return out


def accept_kinds(plugin: str, *kinds: Any) -> list[EntityKind]:
    """``register(kind, …)``: :class:`~drover.model.kinds.EntityKind` values."""
    for kind in kinds:
        if not isinstance(kind, EntityKind):
            raise TypeError(f"plugin {plugin!r} registered {kind!r}, which is not an EntityKind")
    return list(kinds)


def accept_backend(
    plugin: str, name: str, factory: BackendFactory
) -> list[tuple[str, BackendFactory]]:
    """``register(name, factory)``."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"plugin {plugin!r}: a backend name must be a string")
    if not callable(factory):
        raise TypeError(f"plugin {plugin!r}: the factory of backend {name!r} is not callable")
    return [(name, factory)]


def accept_observers(plugin: str, *observers: Any) -> list[Observer]:
    """``register(observer, …)``: objects with ``async def on_history(records)``."""
    for observer in observers:
        if not isinstance(observer, Observer):
            raise TypeError(
                f"plugin {plugin!r} registered {observer!r}, which has no "
                "`async def on_history(records)`"
            )
    return list(observers)
