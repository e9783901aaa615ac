"""``drover new-plugin``: scaffold a plugin package that installs, loads and tests as it is."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path
from string import Template

import click

from drover._version import DISTRIBUTION_NAME, __version__

__all__ = ["new_plugin", "render_plugin", "validate_plugin_name"]

#: ``(template file in drover/cli/_scaffold, path in the generated package)``.
#: ``{package}`` in a path is replaced by the import package's name.
_FILES: tuple[tuple[str, str], ...] = (
    ("pyproject.toml.tmpl", "pyproject.toml"),
    ("README.md.tmpl", "README.md"),
    ("__init__.py.tmpl", "src/{package}/__init__.py"),
    ("test_plugin.py.tmpl", "tests/test_plugin.py"),
)


def validate_plugin_name(name: str) -> None:
    """Raise ``click.ClickException`` (one line) unless ``name`` can name a new plugin.

    The name must be kebab-case (it becomes the handler's name and the entry
    point's), must not start with ``drover-`` (the package name adds that),
    and must not be a built-in handler's name.
    """
    from drover.coordinator.handlers import is_kebab_case

    if name.startswith("drover-"):
        raise click.ClickException(
            f"invalid NAME {name!r}: leave out the 'drover-' prefix, the package name adds it "
            f"(try `drover new-plugin {name.removeprefix('drover-')}`)"
        )
    if not is_kebab_case(name):
        raise click.ClickException(
            f"invalid NAME {name!r}: it must be kebab-case, lowercase letters and digits "
            "in words joined by single hyphens, starting with a letter (e.g. max-duration)"
        )
    from drover.kinds import BUILTIN_PLUGINS, short_name

    builtins = {short_name(plugin_name) for plugin_name, _ in BUILTIN_PLUGINS}
    if name in builtins:
        raise click.ClickException(
            f"invalid NAME {name!r}: a built-in handler has that name, "
            "and handler names must be unique"
        )


def render_plugin(name: str) -> dict[str, str]:
    """Render the scaffold for plugin ``name``: relative path -> file text."""
    snake = name.replace("-", "_")
    package = f"drover_{snake}"
    values = {
        "name": name,
        "snake": snake,
        "package": package,
        "cls": "".join(word.capitalize() for word in name.split("-")),
        "distribution": DISTRIBUTION_NAME,
        "drover_requirement": f"{DISTRIBUTION_NAME}>={_api_floor(__version__)}",
    }
    scaffold = resources.files("drover.cli").joinpath("_scaffold")
    return {
        path.format(package=package): Template(
            scaffold.joinpath(template).read_text(encoding="utf-8")
        ).substitute(values)
        for template, path in _FILES
    }


def _api_floor(version: str) -> str:
    """The oldest drover with the plugin API a generated plugin is written against: ``0.1``
    of ``0.1.0``; a development release itself (``0.2.0.dev0``: 0.2 is not out, and a
    requirement naming a pre-release is the one that admits it)."""
    release, dev, _number = version.partition(".dev")
    return version if dev else ".".join(release.split(".")[:2])


def _write(target: Path, files: dict[str, str]) -> None:
    """Write ``files`` under ``target``; on failure remove what was written."""
    created = not target.exists()
    try:
        target.mkdir(parents=True, exist_ok=True)
        for relative, text in files.items():
            path = target / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    except OSError as error:
        if created:
            shutil.rmtree(target, ignore_errors=True)
        else:  # it existed, empty: empty it again
            for child in target.iterdir():
                if child.is_dir():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
        raise click.ClickException(
            f"cannot write {error.filename or target}: {error.strerror or error}"
        ) from None


@click.command("new-plugin")
@click.argument("name")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(),
    show_default="the current directory",
    help="Where to create the drover-NAME/ folder.",
)
def new_plugin(name: str, directory: Path) -> None:
    """Create drover-NAME/, a plugin package ready to install and test.

    It holds a pyproject.toml with the `drover` entry point, an example
    lifecycle handler named NAME in src/drover_NAME/ (hyphens become
    underscores), tests on the drover_harness pytest fixture, and a README.
    NAME is kebab-case.

    \b
    Example: drover new-plugin max-duration --dir ~/src
    """
    validate_plugin_name(name)
    target = directory / f"drover-{name}"
    if target.exists() and not target.is_dir():
        raise click.ClickException(f"{target} exists and is not a directory; nothing was written")
    if target.is_dir() and any(target.iterdir()):
        raise click.ClickException(
            f"{target} already exists and is not empty; nothing was written "
            "(choose another NAME or --dir, or remove it)"
        )
    files = render_plugin(name)
    _write(target, files)

    shown = str(target)
    click.echo(f"Created {shown}/")
    for relative in files:
        click.echo(f"  {relative}")
    click.echo("\nNext, in the environment where drover is installed:")
    click.echo(f"  cd {shown}")
    click.echo("  pip install -e '.[test]'")
    click.echo("  python -m pytest")
