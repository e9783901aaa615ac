"""The package layout's rules, read from the source (docs/architecture.md, "The layout")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import drover

ROOT = Path(drover.__file__).parent


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute names; drover uses no relative imports).

    ``from package import module`` counts as importing ``package.module``.
    """
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            if node.module == "sqlalchemy":
                found.update(f"sqlalchemy.{alias.name}" for alias in node.names)
                found.discard("sqlalchemy")
    return found


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _drover_imports(path: Path) -> set[str]:
    return {m for m in _imports(path) if m == "drover" or m.startswith("drover.")}


@pytest.mark.parametrize(
    ("package", "allowed"),
    [
        ("model", ("drover.model",)),
        ("coordinator", ("drover.model", "drover.coordinator")),
        ("storage", ("drover.model", "drover.storage")),
    ],
)
def test_model_is_a_leaf_and_coordinator_and_storage_never_import_each_other(package, allowed):
    """model imports nothing of drover; coordinator and storage depend on model only."""
    bad = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in _modules(package)
        for module in _drover_imports(path)
        if not module.startswith(allowed)
    }
    assert not bad, sorted(bad)


def test_backends_import_no_storage():
    """A backend reports through the KernelReporter it is given; it never imports storage.

    It runs the session kind's kernels, in that kind's vocabulary (its values module).
    """
    backends = ROOT / "backends"
    bad = {
        f"{path.relative_to(backends)}: {module}"
        for path in _modules("backends")  # recursively: local/, slurm/ too
        if path != backends / "plugin.py"  # the registration plugin reads the configuration
        for module in _drover_imports(path)
        if not module.startswith(("drover.model", "drover.backends"))
        and module != "drover.kinds.sessions.values"
    }
    assert not bad, sorted(bad)


def test_the_real_backends_share_one_loop():
    """The local, container and slurm backends are TrackingBackends: none of them runs a
    loop, a destroy, a start, a stop or a file retention of its own (the base's, once)."""
    from drover.backends.container import ContainerBackend
    from drover.backends.local import LocalBackend
    from drover.backends.slurm import SlurmBackend
    from drover.backends.tracking import TrackingBackend

    shared = {"start", "stop", "destroy", "prune_files", "_watch", "_stop", "_deliver"}
    for backend in (LocalBackend, ContainerBackend, SlurmBackend):
        assert issubclass(backend, TrackingBackend), backend
        assert not shared & set(vars(backend)), (backend, sorted(shared & set(vars(backend))))


def test_sql_is_built_only_in_storage():
    """Outside drover.storage, nothing imports SQLAlchemy (storage exports its error and
    engine types)."""
    allowed: set[str] = set()
    bad = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in ROOT.rglob("*.py")
        if "storage" not in path.relative_to(ROOT).parts
        for module in _imports(path)
        if module.split(".")[0] == "sqlalchemy" and module not in allowed
    }
    assert not bad, sorted(bad)


_STATEMENT_BUILDERS = frozenset({"select", "insert", "update", "delete", "text"})


def _statement_builders(path: Path) -> list[str]:
    """Where ``path`` builds a statement: ``sa.select(…)`` and the like on the name
    SQLAlchemy is imported as, and ``select``, ``text``… imported from SQLAlchemy."""
    tree = ast.parse(path.read_text(), filename=str(path))
    aliases = {"sa"}
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update(a.asname or a.name for a in node.names if a.name == "sqlalchemy")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlalchemy":
            found.extend(
                f"{node.lineno}: from {node.module} import {a.name}"
                for a in node.names
                if a.name in _STATEMENT_BUILDERS
            )
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in aliases
            and node.func.attr in _STATEMENT_BUILDERS
        ):
            found.append(f"{node.lineno}: {node.func.value.id}.{node.func.attr}(…)")
    return found


def test_shared_statements_are_shared():
    """A storage service keeps its statements beside the code that runs them: a module of
    drover/storage/statements/ is there because several storage modules use it."""
    statements = ROOT / "storage" / "statements"
    users: dict[str, set[str]] = {}
    for path in _modules("storage"):
        for module in _drover_imports(path):
            if module.startswith("drover.storage.statements."):
                users.setdefault(module.rpartition(".")[2], set()).add(str(path))
    lonely = {
        path.stem: sorted(users.get(path.stem, ()))
        for path in statements.glob("*.py")
        if path.stem != "__init__" and len(users.get(path.stem, set()) - {str(path)}) < 2
    }
    assert not lonely, lonely


def test_sql_is_built_in_storage_modules_only(tmp_path):
    """Outside drover/storage, no module builds a statement (nor imports SQLAlchemy)."""
    bad = [
        f"{path.relative_to(ROOT)}:{where}"
        for path in ROOT.rglob("*.py")
        if "storage" not in path.relative_to(ROOT).parts
        for where in _statement_builders(path)
    ]
    assert not bad, bad


def test_the_statement_check_sees_every_spelling(tmp_path):
    """The check above is not blind: it sees each spelling it looks for."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import sqlalchemy as sql\n"
        "from sqlalchemy import text\n"
        "sql.select(t)\n"
        "sa.update(t)\n"
        "sa.Connection\n"
        "sql.func.count()\n"
    )
    assert _statement_builders(sample) == [
        "2: from sqlalchemy import text",
        "3: sql.select(…)",
        "4: sa.update(…)",
    ]


def test_the_dashboard_imports_no_sqlalchemy():
    """drover.web reads only through the repository: not even sqlalchemy's error types."""
    bad = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in _modules("web")
        for module in _imports(path)
        if module.split(".")[0] == "sqlalchemy"
    }
    assert not bad, sorted(bad)


def test_no_code_outside_a_backend_checks_which_backend_it_has():
    """No isinstance() on backend classes outside drover.backends."""
    names = {"SimulatedBackend", "LocalBackend"}
    bad = []
    for path in ROOT.rglob("*.py"):
        if "backends" in path.relative_to(ROOT).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance"
                and any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))
            ):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, bad


#: drover.__all__ before issue 32: the public API is a contract, and no name of it may go (a
#: name that moves keeps working, with a DeprecationWarning naming its replacement).
_PUBLIC_BEFORE = frozenset(
    {
        "DISTRIBUTION_NAME", "TERMINAL_KERNEL_STATUSES", "TERMINAL_SESSION_STATUSES",
        "AgentBackend", "AgentInfo", "AllOf", "AnyOf", "BackendError", "Budget", "BudgetUse",
        "CandidateFilter", "ChildCount", "Children", "Clock", "Coordinator", "CoordinatorStore",
        "DeclaredHandler", "DependenciesFailed", "DependenciesSucceeded", "Dependents",
        "DroverError", "Entity", "EntityKind", "Field", "HandlerOptions", "HandlerRegistry",
        "HandlerResult", "HistoryRecord", "InvalidHandlerError", "InvalidSpecError",
        "KernelHistoryRecord", "KernelInfo", "KernelMatchType", "KernelReport", "KernelReporter",
        "KernelStatus", "KindRegistry", "Kinds", "LatestChild", "LifecycleHandler", "ManualClock",
        "MoveTo", "NewEntity", "Not", "Parent", "Pool", "PromotionRule", "Queries", "Repository",
        "RuntimeContext", "SchedulingResult", "SessionPromotionHandler", "SessionStatus",
        "SessionWithKernels", "SimulatedBackend", "StatusAge", "StatusInfoRule",
        "StatusTransitions", "SystemClock", "Target", "TerminationOutcome", "TerminationRule",
        "TickReport", "TimedOut", "Transition", "TransitionStatus", "UnknownEntityError",
        "UnknownHandlerError", "UnknownKernelError", "UnknownSessionError", "__version__",
        "drover_register_kinds", "hookimpl",
    }
)  # fmt: skip


def _reexports(tree: ast.Module) -> list[tuple[str, str]]:
    """(module, name) of each ``from module import name as name`` in ``tree``, in order."""
    return [
        (node.module or "", alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname == alias.name
    ]


def test_the_public_api_is_listed_once():
    """drover/__init__.py names each public name once, as a re-export (``from m import X as
    X``): ``__all__`` and where the lazy ``__getattr__`` finds each name are read from there,
    and no other list of names (``__all__ = [...]``, a table of modules) repeats them."""
    tree = ast.parse((ROOT / "__init__.py").read_text())
    names = [name for _module, name in _reexports(tree)]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert drover.__all__ == sorted(names)
    repeated = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
    }
    assert not repeated, f"named again as text in drover/__init__.py: {sorted(repeated)}"
    assert not [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign)
        and "__all__" in ast.unparse(node)
    ], "__all__ is read from the re-exports"


def test_the_public_api_is_explicit():
    """Each public name is its module's, imported on first use; none of the names public
    before went, and what plugin authors and embedders use is there."""
    import importlib

    for module, name in _reexports(ast.parse((ROOT / "__init__.py").read_text())):
        assert getattr(drover, name) is getattr(importlib.import_module(module), name), name
    assert set(drover.__all__) >= _PUBLIC_BEFORE, sorted(_PUBLIC_BEFORE - set(drover.__all__))
    # Every example's demo.py builds an App from load_config; docs/plugins/kinds.md
    # declares a kind's limits with Limit; programs that run drover build its plugin manager.
    assert {"App", "load_config", "Limit", "make_plugin_manager"} <= set(drover.__all__)
    star: dict[str, object] = {}
    exec("from drover import *", star)
    assert set(drover.__all__) <= set(star)
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        _ = drover.Nope


# -- drover.kinds: the built-in lifecycles are plugins, and the rest does not know them ----------

#: The names of drover's own kinds, as string literals.
_KIND_NAMES = frozenset({"session", "kernel", "deployment", "route"})

#: The same words compared where they do not name a kind.
_NOT_KINDS: frozenset[tuple[str, str, str]] = frozenset()


def _is_kind_name(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in _KIND_NAMES


class _KindBranches(ast.NodeVisitor):
    """Comparisons of a Name/Attribute with a built-in kind's name (``==``, ``!=``, ``in (…)``)."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.scope: list[str] = []
        self.found: set[tuple[str, str, str]] = set()

    def _enter(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _enter

    def visit_Compare(self, node: ast.Compare) -> None:
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands, operands[1:], strict=False):
            names: list[str] = []
            if isinstance(op, ast.Eq | ast.NotEq):
                names = [
                    literal.value
                    for literal, other in ((left, right), (right, left))
                    if _is_kind_name(literal) and isinstance(other, ast.Name | ast.Attribute)
                ]
            elif (
                isinstance(op, ast.In | ast.NotIn)
                and isinstance(left, ast.Name | ast.Attribute)
                and isinstance(right, ast.Tuple | ast.List | ast.Set)
            ):
                names = [e.value for e in right.elts if _is_kind_name(e)]
            for name in names:
                self.found.add((self.module, ".".join(self.scope) or "<module>", name))
        self.generic_visit(node)


def test_no_code_outside_drover_kinds_branches_on_a_builtin_kind():
    """Generic code takes a kind's rules from its declaration, never from its name."""
    found: set[tuple[str, str, str]] = set()
    for path in ROOT.rglob("*.py"):
        module = path.relative_to(ROOT)
        if module.parts[0] == "kinds":
            continue
        visitor = _KindBranches(module.as_posix())
        visitor.visit(ast.parse(path.read_text(), filename=str(path)))
        found |= visitor.found
    assert not found - _NOT_KINDS, sorted(found - _NOT_KINDS)


def test_the_kind_branch_check_sees_each_spelling():
    """``==``, ``!=`` and ``in (…)`` against a Name or an Attribute are found; other uses not."""
    source = (
        "def f(kind, entity):\n"
        "    a = kind == 'session'\n"
        "    b = 'kernel' != entity.kind\n"
        "    c = entity.kind in (None, 'route')\n"
        "    d = NewEntity('deployment', {})\n"
        "    e = kind == 'job'\n"
    )
    visitor = _KindBranches("m.py")
    visitor.visit(ast.parse(source))
    assert visitor.found == {
        ("m.py", "f", "session"),
        ("m.py", "f", "kernel"),
        ("m.py", "f", "route"),
    }


@pytest.mark.parametrize("package", ["model", "coordinator", "storage"])
def test_the_engine_never_imports_the_builtin_kinds(package):
    """model, coordinator and storage get their kinds from the caller (App, from the plugins)."""
    bad = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in _modules(package)
        for module in _drover_imports(path)
        if module == "drover.kinds" or module.startswith("drover.kinds.")
    }
    assert not bad, sorted(bad)


#: What drover/web/ may import of drover.kinds: the session kind's vocabulary, which its
#: session pages (the dashboard's first pages) are written in.
_WEB_VOCABULARY = "drover.kinds.sessions.values"


def test_the_dashboard_never_imports_the_builtin_kinds():
    """A kind package adds its pages (and its statuses' colours) through drover_register_web;
    drover.web knows none (but the session kind's vocabulary)."""
    web = ROOT / "web"
    bad = {
        f"{path.relative_to(web)}: {module}"
        for path in _modules("web")
        for module in _drover_imports(path)
        if (module == "drover.kinds" or module.startswith("drover.kinds."))
        and module != _WEB_VOCABULARY
    }
    assert not bad, sorted(bad)


#: The session kind's storage layer: its spellings of the generic services
#: (``store.py``, which ``drover.Repository`` names) and its fast row reader.
_SESSION_STORAGE = frozenset({"kinds/sessions/store.py", "kinds/sessions/reading.py"})


@pytest.mark.parametrize("package", ["web", "inspection", "kinds"])
def test_readers_use_only_the_read_only_queries(package):
    """The dashboard, inspection and handlers read storage through Queries, which cannot write.

    (A handler changes the world only through its result.)
    """
    bad = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in _modules(package)
        if path.relative_to(ROOT).as_posix() not in _SESSION_STORAGE
        for module in _drover_imports(path)
        if module.startswith("drover.storage") and module != "drover.storage.queries"
    }
    assert not bad, sorted(bad)


def test_queries_has_no_method_that_writes():
    """Queries is read-only by type: none of the write stores' methods is on it (nor on the
    session kind's spelling of it)."""
    from drover.kinds.sessions.store import SessionQueries, SessionRepository
    from drover.storage.queries import Queries
    from drover.storage.repository import Repository

    writes = {"apply", "promote", "create_entities", "request_termination", "update_spec",
              "report", "report_many", "report_status_info", "record_ticks", "prune_history",
              "link", "reopen", "assign_agents", "heartbeat"}  # fmt: skip
    assert writes <= set(dir(Repository))
    assert not writes & set(dir(Queries))
    session_writes = writes | {"create_sessions", "report_kernel_statuses", "seed_sessions"}
    assert session_writes <= set(dir(SessionRepository))
    assert not session_writes & set(dir(SessionQueries))


#: Modules of drover/kinds/ that may import drover.storage.
_KINDS_READING_STORAGE = frozenset(
    {
        # Until handlers read through their targets only: the route handlers read their
        # replica sessions (and a route's deployment) through the repository.
        "deployments/routes.py",
        # The session kind's storage layer, built on generic storage.
        "sessions/store.py",
        "sessions/queries.py",
        "sessions/reading.py",
    }
)


def test_the_builtin_kinds_do_not_import_storage():
    """A kind's package works through the hooks, its targets and the services it is given."""
    kinds = ROOT / "kinds"
    bad = {
        f"{path.relative_to(kinds)}: {module}"
        for path in _modules("kinds")
        if path.relative_to(kinds).as_posix() not in _KINDS_READING_STORAGE
        for module in _drover_imports(path)
        if module == "drover.storage" or module.startswith("drover.storage.")
    }
    assert not bad, sorted(bad)


# -- the engine names no built-in kind: no literal, no constant, no default ---------------------


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of ``tree`` (a docstring may name a kind)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _kind_names_in(path: Path, names: frozenset[str]) -> list[str]:
    """Where ``path`` spells one of ``names`` as a string (a literal, a constant's value,
    a default), docstrings aside."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = _docstrings(tree)
    return [
        f"{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in names and id(node) not in skip
    ]


@pytest.mark.parametrize("package", ["model", "coordinator", "storage"])
def test_the_engine_names_no_builtin_kind(package):
    """model, coordinator and storage spell no built-in kind's name: not as a literal, a
    constant or a default. (Migrations are history: the schema they built is unchanged.)"""
    from drover.kinds import BUILTIN_KINDS

    names = frozenset(k.name for k in BUILTIN_KINDS)
    bad = [
        f"{path.relative_to(ROOT)}:{where}"
        for path in _modules(package)
        if "migrations" not in path.relative_to(ROOT).parts
        for where in _kind_names_in(path, names)
    ]
    assert not bad, bad


def test_the_kind_name_check_sees_constants_and_defaults(tmp_path):
    """A constant, a default and a literal are found; a docstring naming the kind is not."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""About the session kind: "session"."""\n'
        'SESSION_KIND = "session"\n'
        "def f(kind: str = 'kernel') -> None:\n"
        '    """Default: "kernel"."""\n'
        "    g(kind='route')\n"
    )
    assert _kind_names_in(sample, frozenset({"session", "kernel", "route"})) == [
        "2: 'session'",
        "3: 'kernel'",
        "5: 'route'",
    ]


# -- no layer that only passes a call on ---------------------------------------------------------


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = function.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return [n for n in names if n not in ("self", "cls")]


def _passes_on(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether ``function``'s body (its docstring aside) is one call taking exactly its own
    parameters, unchanged (``self``'s attributes aside): a call passed on."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if len(body) != 1 or not isinstance(body[0], ast.Return | ast.Expr):
        return False
    call = body[0].value
    if isinstance(call, ast.Await):
        call = call.value
    if not isinstance(call, ast.Call):
        return False
    passed: list[str] = []
    for arg in call.args:
        is_attribute = isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name)
        if is_attribute and arg.value.id == "self":  # type: ignore[attr-defined]
            continue
        if not isinstance(arg, ast.Name):
            return False
        passed.append(arg.id)
    for keyword in call.keywords:
        if not isinstance(keyword.value, ast.Name) or keyword.arg not in (None, keyword.value.id):
            return False
        passed.append(keyword.value.id)
    return sorted(passed) == sorted(_parameters(function))


def _forwarders(paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        for cls in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(cls, ast.ClassDef):
                found += [
                    f"{path.name}:{cls.name}.{f.name}"
                    for f in cls.body
                    if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and _passes_on(f)
                ]
    return found


#: At most this many methods of storage and the app only pass a call on (issue 32: the
#: storage services are the implementation; there were 60).
MAX_FORWARDERS = 10


def test_storage_and_the_app_pass_few_calls_on():
    """Storage's services and the App are the implementation, not layers over it."""
    found = _forwarders([*_modules("storage"), ROOT / "app.py"])
    assert len(found) <= MAX_FORWARDERS, found


def test_the_forwarder_check_sees_a_pass_through(tmp_path):
    """A method passing its parameters on is found; one that adds or changes one is not."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "class A:\n"
        "    async def f(self, x, *, y):\n"
        '        """Doc."""\n'
        "        return await self._db.f(self._db, x, y=y)\n"
        "    def g(self, x):\n"
        "        return h(x, 1)\n"
        "    def k(self, x):\n"
        "        return h(x.y)\n"
    )
    assert [f.rpartition(".")[2] for f in _forwarders([sample])] == ["f"]


# -- sizes: no module over 600 lines, no function over 100 (DEVELOPERS.md) ----------------------

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 100


class _FunctionLengths(ast.NodeVisitor):
    """Every function and method, by qualified name (``Class.method``, ``outer.inner``), with
    its length: from its ``def`` line to its last line, decorators not counted."""

    def __init__(self) -> None:
        self.scope: list[str] = []
        self.lengths: list[tuple[str, int]] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        assert node.end_lineno is not None
        self.lengths.append((".".join(self.scope), node.end_lineno - node.lineno + 1))
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _function


def _long_functions(source: str, limit: int) -> list[tuple[str, int]]:
    """The functions of ``source`` longer than ``limit`` lines, in source order."""
    visitor = _FunctionLengths()
    visitor.visit(ast.parse(source))
    return [(name, length) for name, length in visitor.lengths if length > limit]


def test_no_module_is_over_600_lines():
    """A module has one job; past 600 lines it has several (split it by what it holds)."""
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            bad.append(f"{module}: {lines} lines")
    assert not bad, bad


def test_no_function_is_over_100_lines():
    """A function or method past 100 lines (decorators not counted) is split into helpers."""
    bad = [
        f"{module}:{name}: {length} lines"
        for path in sorted(ROOT.rglob("*.py"))
        if (module := path.relative_to(ROOT).as_posix())
        for name, length in _long_functions(path.read_text(), MAX_FUNCTION_LINES)
    ]
    assert not bad, bad


def test_the_function_check_measures_from_def_to_last_line():
    """Decorators are not counted; methods, async and nested functions are each measured,
    by their qualified names; a function of exactly the limit passes."""

    def body(indent: str, lines: int) -> str:
        return f"{indent}x = 1\n" * lines

    source = (
        "@decorator\n@another\ndef fits():\n" + body("    ", 99)
        + "@decorator\ndef too_long():\n" + body("    ", 100)
        + "class C:\n    @staticmethod\n    async def run():\n" + body("        ", 100)
        + "def outer():\n    def inner():\n" + body("        ", 100) + "    return inner\n"
    )  # fmt: skip
    assert _long_functions(source, 100) == [
        ("too_long", 101),
        ("C.run", 101),
        ("outer", 103),
        ("outer.inner", 101),
    ]
    assert _long_functions(source, 101) == [("outer", 103)]


# -- no import circles ------------------------------------------------------------------------


def _module_name(path: Path, root: Path) -> str:
    """``drover/web/app.py`` -> ``drover.web.app``; a package's ``__init__.py`` is the package."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph(root: Path) -> dict[str, set[str]]:
    """Each module of the package at ``root`` -> the modules of that package it imports.

    Every import counts: at module level, inside functions and under ``if
    TYPE_CHECKING:``. ``from p import n`` imports ``p``, and ``p.n`` too when
    that is a module. Each name is resolved to the longest module it starts
    with (``from drover.web.dashboard import page`` -> ``drover.web.dashboard``).
    The package a module sits in, which Python imports first, is not counted:
    that alone is no dependency on what the package's ``__init__.py`` imports.
    """
    paths = {_module_name(path, root): path for path in root.rglob("*.py")}
    package = root.name

    def resolve(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path}:{node.lineno}: a relative import"
                assert node.module, f"{path}:{node.lineno}: a relative import"
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            for name in names:
                if name.split(".")[0] == package and (target := resolve(name)) not in (
                    None,
                    module,
                ):
                    found.add(target)  # type: ignore[arg-type]
        graph[module] = found
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: its strongly connected components of two modules or
    more (Tarjan's algorithm), each sorted, in order of their first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component: list[str] = []
            while not component or component[-1] != module:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def _circle_through(graph: dict[str, set[str]], component: list[str]) -> str:
    """One shortest circle through the first module of ``component``: ``a -> b -> a``."""
    start = component[0]
    inside = set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        module = queue.pop(0)
        for target in sorted(graph[module] & inside):
            if target == start:
                return " -> ".join([*paths[module], start])
            if target not in paths:
                paths[target] = [*paths[module], target]
                queue.append(target)
    raise AssertionError(f"no circle through {start}")


def test_no_import_circle_between_drovers_modules():
    """No module of drover imports, however indirectly, a module that imports it back (every
    import counts, see _import_graph): each circle is listed with one path around it."""
    graph = _import_graph(ROOT)
    bad = [
        f"{', '.join(component)}: {_circle_through(graph, component)}"
        for component in _cycles(graph)
    ]
    assert not bad, "import circles:\n" + "\n".join(bad)


def test_the_import_circle_check_sees_every_spelling(tmp_path):
    """The check is not blind: a circle through a function-level import, a TYPE_CHECKING
    import and an ``import a.b as b``; one through ``from package import module`` and the
    package's own TYPE_CHECKING import; and not the implicit import of a module's package."""
    checking = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
    files = {
        "__init__.py": checking + "    from pkg.e import E\n",
        "e.py": "from pkg import a\n",
        "a.py": "def f():\n    from pkg.b import B\n",
        "b.py": checking + "    from pkg.c import C\n",
        "c.py": "import os\nimport pkg.a as a\n",
        "sub/__init__.py": "from pkg.sub.m import M\n",
        "sub/m.py": "from pkg.sub.n import N\n",
        "sub/n.py": "N = 1\n",
    }
    root = tmp_path / "pkg"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    graph = _import_graph(root)
    assert graph["pkg.e"] == {"pkg", "pkg.a"}
    assert graph["pkg.sub.m"] == {"pkg.sub.n"}
    assert _cycles(graph) == [["pkg", "pkg.e"], ["pkg.a", "pkg.b", "pkg.c"]]
    assert _circle_through(graph, ["pkg.a", "pkg.b", "pkg.c"]) == "pkg.a -> pkg.b -> pkg.c -> pkg.a"
