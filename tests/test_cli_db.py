"""``drover db upgrade`` / ``drover db current`` on both databases."""

from __future__ import annotations

from click.testing import CliRunner

from drover.cli import main
from drover.storage import head_revision


def test_upgrade_then_current(database, monkeypatch):
    """An empty database is reported as such, upgraded, then reported at head."""
    if database.schema:
        monkeypatch.setenv("DROVER_DATABASE_SCHEMA", database.schema)
    runner = CliRunner()
    result = runner.invoke(main, ["db", "current", "--database", database.url])
    assert result.exit_code == 0, result.output
    assert "empty database" in result.output
    result = runner.invoke(main, ["db", "upgrade", "--database", database.url])
    assert result.exit_code == 0, result.output
    assert f"upgraded empty database -> {head_revision()} (head)" in result.output
    result = runner.invoke(main, ["db", "upgrade", "--database", database.url])
    assert f"already at {head_revision()}" in result.output
    result = runner.invoke(main, ["db", "current", "--database", database.url])
    assert result.output.strip() == f"{head_revision()} (head)"


def test_unreachable_database_is_one_clear_line():
    """A database that cannot be reached gives one line on stderr and a non-zero exit."""
    runner = CliRunner()
    result = runner.invoke(
        main, ["db", "current", "--database", "postgresql+asyncpg://nobody@127.0.0.1:1/none"]
    )
    assert result.exit_code == 1
    assert result.output.startswith("Error: cannot reach the database:")
    assert len(result.output.strip().splitlines()) == 1


def test_help_has_examples():
    """Every db command's --help shows an example."""
    runner = CliRunner()
    for args in (["db"], ["db", "upgrade"], ["db", "current"]):
        result = runner.invoke(main, [*args, "--help"])
        assert result.exit_code == 0
        assert "Example: drover db" in result.output
