"""The public API is recorded in tests/public_api.txt: nothing in it goes without a deprecation.

drover's public API (docs/plugins/upgrading.md) is every name of ``drover.__all__``
and of ``drover.testing`` (with its pytest plugin's fixtures and marker keys), each
hook specification and its parameters, and the public attributes and constructor
parameters of the exported classes (and the parameters of the exported functions).
``tests/public_api.txt`` records it, one sorted line an item:

    drover.Name                 a public name
    drover.Name.attribute       a public attribute of an exported class
    drover.Name(#0 param)       a positional parameter, by its position ...
    drover.Name(#1 param=)      ... which has a default
    drover.Name(*, param=)      a keyword-only parameter (``*args`` and ``**kwargs`` alike)
    hook drover_register_x(register)   a hook specification's parameter
    @pytest.mark.drover(key=)   a key of the ``drover`` marker

The test fails when a recorded item is gone, unless using it still works and
warns (``DeprecationWarning``) naming its replacement; a parameter must stay
where callers pass it. It also fails when the code has an item the file does
not record: adding to the public API is a change of the file, seen in review.
``DROVER_UPDATE_PUBLIC_API=1`` rewrites the file from the code (keeping the
deprecated items that still work): review its diff, then commit it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import re
import textwrap
import typing
import warnings
from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from pathlib import Path
from typing import Any

import pytest

RECORD = Path(__file__).with_name("public_api.txt")
UPDATE_VARIABLE = "DROVER_UPDATE_PUBLIC_API"
HOW_TO_UPDATE = (
    f"if the change is meant, run `{UPDATE_VARIABLE}=1 python -m pytest tests/test_public_api.py`"
    " and commit tests/public_api.txt with it (docs/plugins/upgrading.md: the contract)"
)

#: The modules whose listed names are public: module -> how it lists them.
PUBLIC_MODULES: Mapping[str, Callable[[Any], Iterable[str]]] = {
    "drover": lambda module: module.__all__,
    "drover.testing": lambda module: module.__all__,
    # The fixtures a plugin's tests request by name (entry point pytest11).
    "drover.testing.pytest_plugin": lambda module: module.__all__,
}

_PARAMETER = re.compile(r"^(?P<target>[\w.]+)\((?P<spec>[^()]*)\)$")
_HOOK = re.compile(r"^hook (?P<hook>\w+)\((?P<param>\w+)\)$")
_MARKER = re.compile(r"^@pytest\.mark\.drover\((?P<key>\w+)=\)$")
_NAMES_A_REPLACEMENT = re.compile(r"\bdeprecated\b.*\buse [\w.]+")


# -- the surface, read from the code --------------------------------------------------------------


def _is_drovers(klass: type) -> bool:
    return klass.__module__ == "drover" or klass.__module__.startswith("drover.")


def _class_of(value: object) -> type | None:
    """The class ``value`` is, or names (``Registry[RegisteredHandler]`` names ``Registry``)."""
    if isinstance(value, type):
        return value
    origin = typing.get_origin(value)
    return origin if isinstance(origin, type) else None


def _assigned_in_init(klass: type) -> set[str]:
    """The public ``self.name = …`` of ``klass``'s own ``__init__`` (attrs writes its own:
    its fields are read from the class)."""
    init = vars(klass).get("__init__")
    if not inspect.isfunction(init):
        return set()
    try:
        source = textwrap.dedent(inspect.getsource(init))
    except (OSError, TypeError):
        return set()
    found = set()
    for node in ast.walk(ast.parse(source)):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                found.add(target.attr)
    return found


def attributes(klass: type) -> set[str]:
    """The public attributes of ``klass``: what it and its drover bases define (methods,
    properties, fields, enum members, annotated and ``__init__``-assigned attributes)."""
    found: set[str] = set()
    for base in klass.__mro__:
        if not _is_drovers(base):
            continue
        found.update(vars(base))
        found.update(vars(base).get("__annotations__", {}))
        found.update(_assigned_in_init(base))
    return {name for name in found if not name.startswith("_")}


def parameters(value: object) -> set[str]:
    """``value``'s parameter specs (``#0 name``, ``#1 name=``, ``*, name=``, ``*args``,
    ``**kwargs``): a function's, or the constructor's of a class drover defines one for
    (none for a protocol, an enum or an exception taking what its base takes)."""
    klass = _class_of(value)
    if klass is not None:
        if getattr(klass, "_is_protocol", False) or issubclass(klass, Enum):
            return set()
        maker = next(
            (b for b in klass.__mro__ if "__init__" in vars(b) or "__new__" in vars(b)), object
        )
        if not _is_drovers(maker):
            return set()
        signature = inspect.signature(klass)
    elif inspect.isfunction(value):
        signature = inspect.signature(value)
    else:
        return set()
    specs = set()
    for index, param in enumerate(signature.parameters.values()):
        default = "" if param.default is inspect.Parameter.empty else "="
        if param.kind is param.VAR_POSITIONAL:
            specs.add(f"*{param.name}")
        elif param.kind is param.VAR_KEYWORD:
            specs.add(f"**{param.name}")
        elif param.kind is param.KEYWORD_ONLY:
            specs.add(f"*, {param.name}{default}")
        else:
            specs.add(f"#{index} {param.name}{default}")
    return specs


def _hooks() -> dict[str, list[str]]:
    from drover.plugins import hookspecs

    return {
        name: list(inspect.signature(function).parameters)
        for name, function in vars(hookspecs).items()
        if inspect.isfunction(function) and hasattr(function, "drover_spec")
    }


def _marker_keys() -> set[str]:
    from drover.testing import pytest_plugin

    return set(pytest_plugin._MARKER_KEYS)


def surface(public: Mapping[str, Callable[[Any], Iterable[str]]] = PUBLIC_MODULES) -> set[str]:
    """The public API as the code has it today, one line an item (the module docstring)."""
    lines: set[str] = set()
    for module_name, listed in public.items():
        module = importlib.import_module(module_name)
        for name in listed(module):
            value = getattr(module, name)
            dotted = f"{module_name}.{name}"
            lines.add(dotted)
            lines.update(f"{dotted}({spec})" for spec in parameters(value))
            klass = _class_of(value)
            if klass is not None:
                lines.update(f"{dotted}.{attribute}" for attribute in attributes(klass))
    for hook, params in _hooks().items():
        lines.update(f"hook {hook}({param})" for param in params)
    lines.update(f"@pytest.mark.drover({key}=)" for key in _marker_keys())
    return lines


# -- is a recorded item still there? --------------------------------------------------------------


def _resolve(dotted: str) -> tuple[object, list[warnings.WarningMessage]]:
    """The object ``dotted`` names (its longest importable module, then attributes), with the
    warnings reading it gave. An attribute only instances have resolves to its class's
    ``attributes()`` naming it: ``(the class, …)``. Raises AttributeError if it is gone."""
    parts = dotted.split(".")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for cut in range(len(parts), 0, -1):
            try:
                value: object = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for depth, part in enumerate(parts[cut:], start=cut):
                try:
                    value = getattr(value, part)
                except AttributeError:
                    klass = _class_of(value)
                    if depth == len(parts) - 1 and klass is not None and part in attributes(klass):
                        break
                    raise
            return value, list(caught)
    raise AttributeError(dotted)


def _deprecated(caught: list[warnings.WarningMessage]) -> bool:
    """Whether one of ``caught`` is a DeprecationWarning that names a replacement."""
    return any(
        issubclass(w.category, DeprecationWarning) and _NAMES_A_REPLACEMENT.search(str(w.message))
        for w in caught
    )


def _parameter_kept(recorded: str, specs: set[str]) -> bool:
    """Whether a caller passing the ``recorded`` parameter as it could still can: same
    position (or by keyword), and a default if it had one."""
    name = recorded.lstrip("#*, 0123456789").rstrip("=")
    had_default = recorded.endswith("=")
    for spec in specs:
        if spec.lstrip("#*, 0123456789").rstrip("=") != name:
            continue
        if had_default and not spec.endswith("="):
            return False
        if recorded.startswith("#"):
            return spec.split()[0] == recorded.split()[0]
        return spec.startswith(("#", "*, ")) if recorded.startswith("*, ") else spec == recorded
    return False


def missing(line: str, current: set[str]) -> str | None:
    """Why the recorded ``line`` is no longer kept (``None``: it is)."""
    if line in current:
        return None
    if match := _HOOK.match(line):
        if match["param"] in _hooks().get(match["hook"], ()):
            return None
        return "a hook specification or its parameter went"
    if _MARKER.match(line):
        return "the drover marker no longer takes this key"
    if match := _PARAMETER.match(line):
        try:
            value, _caught = _resolve(match["target"])
        except AttributeError:
            return f"{match['target']} went"
        if _parameter_kept(match["spec"], parameters(value)):
            return None
        return "a caller passing this parameter there breaks: keep it (warn when it is passed)"
    try:
        _value, caught = _resolve(line)
    except AttributeError:
        return "it went without a deprecation: bring it back, warning and naming its replacement"
    if _deprecated(caught):
        return None
    return (
        "it is no longer listed, and using it gives no DeprecationWarning naming its "
        "replacement: list it again, or make it warn"
    )


# -- the record ------------------------------------------------------------------------------


def _read_record() -> list[str]:
    return [
        line
        for line in RECORD.read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    ]


_HEADER = f"""\
# drover's public API, one item a line, sorted (tests/test_public_api.py says how to read it).
# Nothing here goes without a deprecation (docs/plugins/upgrading.md), and whatever becomes
# public is added here in the same change. To rewrite this file from the code:
#     {UPDATE_VARIABLE}=1 python -m pytest tests/test_public_api.py
"""


def _write_record(lines: Iterable[str]) -> None:
    RECORD.write_text(_HEADER + "\n".join(sorted(set(lines))) + "\n", encoding="utf-8")


def test_the_public_api_is_kept_and_recorded():
    """Every recorded item is still there (or deprecated, warning with its replacement), and
    everything public is recorded."""
    current = surface()
    recorded = _read_record()
    gone = {line: why for line in recorded if (why := missing(line, current)) is not None}
    if os.environ.get(UPDATE_VARIABLE) == "1":
        kept_deprecated = {line for line in recorded if line not in gone} - current
        _write_record(current | {line for line in kept_deprecated if not _PARAMETER.match(line)})
        return
    assert not gone, "\n".join(
        ["Public API gone (docs/plugins/upgrading.md):"]
        + [f"  {line}: {why}" for line, why in sorted(gone.items())]
        + [HOW_TO_UPDATE + " (the removal is then announced in CHANGELOG.md)"]
    )
    new = sorted(current - set(recorded))
    assert not new, "\n".join(
        ["Public API not recorded in tests/public_api.txt:"]
        + [f"  {line}" for line in new]
        + [HOW_TO_UPDATE]
    )


def test_the_record_is_sorted_without_repeats():
    """One line an item, sorted: the file's diff is the API's change, line by line."""
    recorded = _read_record()
    assert recorded == sorted(set(recorded))


# -- the check is not blind ------------------------------------------------------------------------


def test_a_name_that_went_is_missing_and_a_deprecated_one_is_not():
    """A removed name is reported; one that warns naming its replacement (an old home of
    ``make_plugin_manager``, of ``EndpointLifecycle``) is kept; one still there but silently
    left out of ``__all__`` is reported."""
    current = surface()
    assert "went without a deprecation" in missing("drover.NoSuchName", current)
    assert missing("drover.plugins.make_plugin_manager", current) is None
    assert missing("drover.model.status.EndpointLifecycle", current) is None
    assert missing("drover.model.status.EndpointLifecycle.READY", current) is None
    without = surface({"drover": lambda m: [n for n in m.__all__ if n != "Coordinator"]})
    assert "gives no DeprecationWarning" in missing("drover.Coordinator", without)


def test_attributes_include_instance_fields_members_and_properties():
    """What an instance carries counts, whichever way the class declares it; a removed
    attribute is reported, a deprecated property is kept."""
    current = surface()
    assert {
        "drover.App.config",  # self.config = … in __init__
        "drover.App.repository",  # a property
        "drover.Entity.status",  # an attrs field
        "drover.SessionStatus.PENDING",  # an enum member
        "drover.RuntimeContext.repository",  # deprecated, still a property
        "drover.testing.CoordinatorHarness.clock",
        "drover.HandlerRegistry.context",  # Registry[RegisteredHandler]: Registry's
    } <= current
    assert "drover.App._repository" not in current
    assert "drover.SessionStatus.upper" not in current  # str's, not drover's
    assert missing("drover.App.no_such_attribute", current) is not None


def test_parameters_are_kept_by_position_keyword_and_default():
    """A parameter stays where callers pass it; gaining a default is no break, losing one,
    moving or going is."""
    assert _parameter_kept("#0 config", {"#0 config="})
    assert not _parameter_kept("#0 config=", {"#0 config"})
    assert not _parameter_kept("#1 clock", {"#2 clock", "#1 other"})
    assert _parameter_kept("*, clock=", {"#3 clock="})
    assert not _parameter_kept("*, clock=", {"*, other="})
    assert _parameter_kept("**kwargs", {"**kwargs"})
    current = surface()
    assert "drover.App(#0 config)" in current
    assert "drover.RuntimeContext(*, reporter=)" not in current
    assert "drover.RuntimeContext(#3 reporter=)" in current
    assert missing("drover.RuntimeContext(#0 queries)", current) is None
    assert missing("drover.RuntimeContext(#0 repository)", current) is not None
    assert missing("hook drover_register_handlers(register)", current) is None
    assert missing("hook drover_register_handlers(context)", current) is not None
    assert missing("@pytest.mark.drover(no_such_key=)", current) is not None


@pytest.mark.parametrize(
    "line",
    [
        "drover.make_plugin_manager",
        "drover.testing.CoordinatorHarness",
        "drover.testing.pytest_plugin.drover_harness",
        "hook drover_register_web(register)",
        "@pytest.mark.drover(plugins=)",
        "drover.Coordinator(#0 store)",
        "drover.load_config(#0 path=)",
    ],
)
def test_the_record_holds_each_kind_of_item(line):
    """Names, the testing kit's fixtures and marker keys, hook parameters, constructor and
    function parameters are all recorded."""
    assert line in _read_record()
