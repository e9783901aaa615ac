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
    """A backend reports through the KernelReporter it is given; it never imports storage."""
    backends = ROOT / "backends"
    bad = {
        f"{path.relative_to(backends)}: {module}"
        for path in _modules("backends")  # recursively: local/, slurm/ too
        if path != backends / "plugin.py"  # the registration plugin reads the configuration
        for module in _drover_imports(path)
        if not module.startswith(("drover.model", "drover.backends"))
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


def test_storage_builds_statements_only_in_statements():
    """Every SQL statement builder of storage is in drover/storage/statements/ (table
    definitions in schema.py, Alembic migrations in migrations/): the other modules
    only execute them."""
    storage = ROOT / "storage"
    allowed = (storage / "statements", storage / "schema.py", storage / "migrations")
    bad = [
        f"{path.relative_to(ROOT)}:{where}"
        for path in _modules("storage")
        if not any(path == a or a in path.parents for a in allowed)
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


def test_the_public_api_is_explicit():
    """drover/__init__.py lists every public name, and each one is importable."""
    assert len(drover.__all__) == len(set(drover.__all__))
    for name in drover.__all__:
        assert getattr(drover, name) is not None, name


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


#: Modules of drover/web/ that may import drover.kinds.
_WEB_IMPORTING_KINDS = frozenset(
    {
        # The one colour per status: every built-in kind's status must have one.
        "palette.py",
    }
)


def test_the_dashboard_never_imports_the_builtin_kinds():
    """A kind package adds its pages through drover_register_web; drover.web knows none."""
    web = ROOT / "web"
    bad = {
        f"{path.relative_to(web)}: {module}"
        for path in _modules("web")
        if path.relative_to(web).as_posix() not in _WEB_IMPORTING_KINDS
        for module in _drover_imports(path)
        if module == "drover.kinds" or module.startswith("drover.kinds.")
    }
    assert not bad, sorted(bad)


@pytest.mark.parametrize("package", ["web", "inspection", "kinds"])
def test_readers_use_only_the_read_only_queries(package):
    """The dashboard, inspection and handlers read storage through Queries, which cannot write.

    (A handler changes the world only through its result.)
    """
    bad = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in _modules(package)
        for module in _drover_imports(path)
        if module.startswith("drover.storage") and module != "drover.storage.queries"
    }
    assert not bad, sorted(bad)


def test_queries_has_no_method_that_writes():
    """Queries is read-only by type: none of the write store's methods is on it."""
    from drover.storage.queries import Queries
    from drover.storage.repository import Repository

    writes = {"apply", "promote", "create_entities", "request_termination", "update_spec",
              "report_kernel_statuses", "record_ticks", "prune_history", "link"}  # fmt: skip
    assert writes <= set(dir(Repository))
    assert not writes & set(dir(Queries))


#: Modules of drover/kinds/ that may import drover.storage.
_KINDS_READING_STORAGE = frozenset(
    {
        # Until handlers read through their targets only: the route handlers read their
        # replica sessions (and a route's deployment) through the repository.
        "deployments/routes.py",
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
