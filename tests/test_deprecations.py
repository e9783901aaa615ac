"""Public names that moved keep working, warning with the name that replaces them."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

import drover

#: (old module, name, new module) of every name that moved.
MOVED = [
    ("drover.model.status", "SessionStatus", "drover.kinds.sessions.values"),
    ("drover.model.status", "KernelStatus", "drover.kinds.sessions.values"),
    ("drover.model.status", "TERMINAL_SESSION_STATUSES", "drover.kinds.sessions.values"),
    ("drover.model.status", "TERMINAL_KERNEL_STATUSES", "drover.kinds.sessions.values"),
    ("drover.model.values", "KernelInfo", "drover.kinds.sessions.values"),
    ("drover.model.values", "KernelReport", "drover.kinds.sessions.values"),
    ("drover.model.values", "SessionWithKernels", "drover.kinds.sessions.values"),
    ("drover.model.values", "TransitionStatus", "drover.kinds.sessions.values"),
    ("drover.model.errors", "UnknownSessionError", "drover.kinds.sessions.values"),
    ("drover.model.errors", "UnknownKernelError", "drover.kinds.sessions.values"),
    ("drover.model.rules", "HOLDING_KERNEL_STATUSES", "drover.kinds.sessions.values"),
    ("drover.model.rules", "NON_TERMINAL_KERNEL_STATUSES", "drover.kinds.sessions.values"),
    ("drover.model.spec", "new_session", "drover.kinds.sessions.requests"),
    # Moved during 0.1 without a warning (issue 34): back, deprecated, in 0.2.
    ("drover.model.status", "EndpointLifecycle", "drover.kinds.deployments.status"),
    ("drover.model.status", "RouteStatus", "drover.kinds.deployments.status"),
    ("drover.model.kinds", "SESSION", "drover.kinds.sessions.kinds"),
    ("drover.model.kinds", "KERNEL", "drover.kinds.sessions.kinds"),
    ("drover.model.kinds", "DEPLOYMENT", "drover.kinds.deployments.kinds"),
    ("drover.model.kinds", "ROUTE", "drover.kinds.deployments.kinds"),
    ("drover.model.kinds", "BUILTIN_KINDS", "drover.kinds.builtin"),
    ("drover.model.spec", "ENGINE_KERNEL_KEYS", "drover.kinds.sessions.kinds"),
    ("drover.model.spec", "check_kernel_spec", "drover.kinds.sessions.kinds"),
    ("drover.model.spec", "KERNEL_DEFAULTS", "drover.kinds.sessions.defaults"),
    ("drover.model.spec", "with_kernel_defaults", "drover.kinds.sessions.defaults"),
    ("drover.model.spec", "MAX_NAME_LENGTH", "drover.model.checks"),
    ("drover.model.spec", "PRIORITY_RANGE", "drover.model.checks"),
    ("drover.model.spec", "is_kebab_case", "drover.model.checks"),
]


@pytest.mark.parametrize(("old", "name", "new"), MOVED)
def test_a_moved_name_warns_and_is_the_same_object(old, name, new):
    """The old spelling returns the very object of the new one, with a DeprecationWarning
    that names the new spelling."""
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=rf"{old}\.{name} is deprecated: use {new}\.{name}"):
        value = getattr(module, name)
    assert value is getattr(importlib.import_module(new), name)


def test_the_top_level_names_did_not_move():
    """drover.SessionStatus and the like are where they were: no warning at all."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert drover.SessionStatus.PENDING == "PENDING"
        assert drover.KernelInfo.__name__ == "KernelInfo"


def test_an_unknown_name_is_still_an_attribute_error():
    """Only moved names resolve: a typo is an AttributeError, not a warning."""
    module = importlib.import_module("drover.model.status")
    with pytest.raises(AttributeError, match="SessionStatuss"):
        module.SessionStatuss  # noqa: B018


def test_a_record_built_without_its_kind_warns():
    """HistoryEvent, HistoryRecord and TerminationOutcome defaulted to the session kind; built
    without ``kind=`` they warn (the engine names no kind) and carry kind ``""``."""
    from datetime import UTC, datetime

    from drover import HistoryRecord, SchedulingResult, TerminationOutcome
    from drover.coordinator.observers import HistoryEvent

    now = datetime.now(UTC)
    with pytest.warns(DeprecationWarning, match=r"HistoryEvent\(\) without kind= is deprecated"):
        event = HistoryEvent("h", "e1", SchedulingResult.SUCCESS, "A", "B", None, None, now)
    assert event.kind == ""
    with pytest.warns(DeprecationWarning, match=r"HistoryRecord\(\) without kind="):
        HistoryRecord(1, "e1", "h", SchedulingResult.SUCCESS, "A", "B", None, None, 1, now, now)
    with pytest.warns(DeprecationWarning, match=r"TerminationOutcome\(\) without kind="):
        TerminationOutcome("e1", "A", "B", True)
    assert TerminationOutcome("e1", "A", "B", True, kind="job").kind == "job"


# -- what went during 0.1 without a warning (issue 34), back with one ---------------------------


class _ContextKeeper:
    """A plugin of 0.1's first days: it keeps the RuntimeContext its hook is handed."""

    context: drover.RuntimeContext | None = None

    @drover.hookimpl
    def drover_register_handlers(self, register: drover.HandlerRegistry) -> None:
        self.context = register.context


_REPOSITORY_WARNING = (
    r"RuntimeContext\.repository is deprecated: use RuntimeContext\.queries to read, "
    r"RuntimeContext\.reporter to report"
)


async def test_runtime_context_repository_warns_and_reads_and_reports(make_harness):
    """``context.repository`` (gone with issue 18) is the repository drover reads and reports
    through again: a plugin's reads and pushed reports through it work, with a warning
    naming ``queries`` and ``reporter``."""
    keeper = _ContextKeeper()
    async with make_harness(plugins=[keeper]) as h:
        assert keeper.context is not None
        with pytest.warns(DeprecationWarning, match=_REPOSITORY_WARNING):
            repository = keeper.context.repository
        assert repository is keeper.context.reporter is h.repository
        sid = await h.create_session()
        assert (await repository.get_session(sid)).status == drover.SessionStatus.PENDING
        assert await repository.report(sid, "PENDING", expected=["PENDING"], data={"via": "old"})
        assert (await h.get(sid)).data["via"] == "old"


async def test_runtime_context_built_the_old_way_keeps_its_repository(make_harness):
    """``RuntimeContext(repository, backend, clock)`` as 0.1's first days built it: the
    repository passed first (now ``queries``) is what ``.repository`` gives back; a context
    with neither a repository nor a reporter says what to use instead."""
    async with make_harness() as h:
        old = drover.RuntimeContext(h.repository, h.backend, h.clock)
        with pytest.warns(DeprecationWarning, match=_REPOSITORY_WARNING):
            assert old.repository is h.repository
        reads_only = drover.RuntimeContext(h.app.queries, h.backend, h.clock)
        with (
            pytest.warns(DeprecationWarning, match=_REPOSITORY_WARNING),
            pytest.raises(AttributeError, match="read through its queries and report through"),
        ):
            _ = reads_only.repository


#: What plugins wrote on the counts of ``Entity.budgets`` early in 0.1 (``{name: used}``), with
#: ``used`` 2, and what it gave.
_COUNT_EXPRESSIONS = {
    "get(name, 0) + 1": (lambda b: b.get("retries", 0) + 1, 3),
    "1 + used": (lambda b: 1 + b["retries"], 3),
    "used - 2": (lambda b: b["retries"] - 2, 0),
    "3 - used": (lambda b: 3 - b["retries"], 1),
    "used == 2": (lambda b: b["retries"] == 2, True),
    "used != 3": (lambda b: b["retries"] != 3, True),
    "used < 3": (lambda b: b["retries"] < 3, True),
    "used <= 1": (lambda b: b["retries"] <= 1, False),
    "used > 1": (lambda b: b["retries"] > 1, True),
    "used >= 3": (lambda b: b["retries"] >= 3, False),
    "int(used)": (lambda b: int(b["retries"]), 2),
    "sum(values)": (lambda b: sum(b.values()), 2),
    "as an index": (lambda b: ["a", "b", "c"][b["retries"]], "c"),
}


@pytest.mark.parametrize("expression", _COUNT_EXPRESSIONS)
def test_a_budget_use_taken_for_a_count_warns_and_counts(expression):
    """``Entity.budgets`` held counts early in 0.1: the expressions plugins wrote on them still
    give what they gave, each warning (at the plugin's line) and naming ``BudgetUse.used``."""
    compute, expected = _COUNT_EXPRESSIONS[expression]
    budgets = {"retries": drover.BudgetUse(2, 3)}
    counted = r"a BudgetUse as a count is deprecated: use BudgetUse\.used"
    with pytest.warns(DeprecationWarning, match=counted) as caught:
        value = compute(budgets)
    assert value == expected
    assert [w.filename for w in caught] == [__file__]


def test_a_budget_use_is_a_value_without_warning():
    """Between BudgetUses, equality is the value's (used and limit), hashing agrees with it,
    and no warning is given; comparing with a string is plainly unequal."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        use = drover.BudgetUse(3, 5)
        assert use == drover.BudgetUse(3, 5)
        assert use != drover.BudgetUse(3, None)
        assert {use: "x"}[drover.BudgetUse(3, 5)] == "x"
        assert use != "3/5"
        assert (str(use), use.left) == ("3/5", 2)
    with pytest.raises(TypeError):
        _ = use < drover.BudgetUse(4, 5)


# -- drover's own code, docs and examples use the new spellings ---------------------------------

_ROOT = Path(__file__).resolve().parent.parent

#: Where an old spelling may stand: the pages that name them to say what replaces them.
_NAMING_OLD_SPELLINGS = {"CHANGELOG.md", "docs/plugins/upgrading.md"}


def _old_spellings(text: str) -> list[str]:
    """The deprecated spellings ``text`` uses: a moved name read from its old module (dotted
    or imported, parenthesised imports too), ``context.repository``, and the plugin manager
    made through ``drover.plugins``."""
    found = []
    for old, name, _new in MOVED:
        dotted = re.compile(rf"\b{re.escape(old)}\.{name}\b")
        imported = re.compile(rf"\bfrom {re.escape(old)} import (\([^)]*\)|[^\n]*)")
        found += [m.group(0) for m in dotted.finditer(text)]
        found += [
            f"from {old} import {name}"
            for m in imported.finditer(text)
            if re.search(rf"\b{name}\b", m.group(1))
        ]
    found += re.findall(r"\bcontext\.repository\b", text)
    found += re.findall(r"\bdrover\.plugins(?:\.manager)?\.make_plugin_manager\b", text)
    found += re.findall(
        r"\bfrom drover\.plugins(?:\.manager)? import [^\n]*make_plugin_manager", text
    )
    return found


def test_docs_examples_and_drover_use_no_old_spelling():
    """README, docs/, examples/, bench/ and drover/ itself spell every moved name at its new
    home (the test suite's filterwarnings=error catches what runs; this, what is only read)."""
    paths = [_ROOT / "README.md", *(_ROOT / "docs").rglob("*.md")]
    for top in ("examples", "bench", "drover"):
        paths += [p for p in (_ROOT / top).rglob("*") if p.suffix in (".py", ".md", ".toml")]
    bad = {
        f"{path.relative_to(_ROOT)}: {spelling}"
        for path in paths
        if path.relative_to(_ROOT).as_posix() not in _NAMING_OLD_SPELLINGS
        for spelling in _old_spellings(path.read_text(encoding="utf-8"))
    }
    assert not bad, sorted(bad)


def test_the_old_spelling_check_sees_each_form():
    """Dotted, imported on one line or in parentheses, and the two other old spellings."""
    text = (
        "x = drover.model.status.EndpointLifecycle.READY\n"
        "from drover.model.values import Entity, KernelInfo\n"
        "from drover.model.spec import (\n    new_session,\n    other,\n)\n"
        "repo = register.context.repository\n"
        "pm = drover.plugins.make_plugin_manager()\n"
        "from drover.model.values import Entity\n"
    )
    assert sorted(_old_spellings(text)) == sorted(
        [
            "drover.model.status.EndpointLifecycle",
            "from drover.model.values import KernelInfo",
            "from drover.model.spec import new_session",
            "context.repository",
            "drover.plugins.make_plugin_manager",
        ]
    )


def test_the_upgrading_page_names_every_moved_name_and_its_new_home():
    """docs/plugins/upgrading.md tells a plugin author each old spelling and what to write
    instead: a table row per moved name, with its new module."""
    text = (_ROOT / "docs/plugins/upgrading.md").read_text(encoding="utf-8")
    rows = {
        row.split("|")[1].strip(): row.split("|")[2]
        for row in text.splitlines()
        if row.startswith("| `")
    }
    for old, name, new in MOVED:
        row = rows.get(f"`{old}.{name}`")
        assert row is not None, f"no row for {old}.{name}"
        if f"`drover.{name}`" in row:  # the top-level name: the very object of its new home
            assert getattr(drover, name) is getattr(importlib.import_module(new), name)
        else:
            assert f"{new}.{name}" in row, (old, name, row)
    for spelling in ("RuntimeContext.repository", "BudgetUse.used", "make_plugin_manager"):
        assert spelling in text
