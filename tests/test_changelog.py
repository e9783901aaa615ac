"""CHANGELOG.md, pyproject's version and ``drover.__version__`` agree (the rule at the top of
CHANGELOG.md): the package is the newest released version, or, while ``[Unreleased]`` has
entries, the development release of the version those entries make."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

import drover
from drover import _version

ROOT = Path(__file__).resolve().parent.parent
CHANGELOG = ROOT / "CHANGELOG.md"

#: Keep a Changelog's groups, in its order.
GROUPS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)(?:\.dev(\d+))?")
_HEADING = re.compile(r"^## \[(?P<version>[^\]]+)\](?: - (?P<date>\S+))?$")


def sections(text: str) -> list[tuple[str, str | None, dict[str, list[str]]]]:
    """Each ``## [version] - date`` of ``text``, newest first: (version, date, {group:
    entries}). A group heading other than Keep a Changelog's, or twice in one version, or an
    entry outside a group, raises ValueError."""
    found: list[tuple[str, str | None, dict[str, list[str]]]] = []
    group: list[str] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("## "):
            heading = _HEADING.match(line)
            if heading is None:
                raise ValueError(f"line {number}: not '## [version] - YYYY-MM-DD': {line!r}")
            found.append((heading["version"], heading["date"], {}))
            group = None
        elif line.startswith("### "):
            name = line.removeprefix("### ")
            if not found or name not in GROUPS or name in found[-1][2]:
                raise ValueError(f"line {number}: unexpected group {line!r}")
            group = found[-1][2].setdefault(name, [])
        elif line.startswith("- "):
            if group is None:
                raise ValueError(f"line {number}: an entry outside a group")
            group.append(line[2:])
        elif line.startswith("  ") and group:
            group[-1] += " " + line.strip()
    return found


def _release(version: str) -> tuple[int, int, int]:
    match = _VERSION.fullmatch(version)
    if match is None:
        raise ValueError(f"not a version drover uses (X.Y.Z or X.Y.Z.devN): {version!r}")
    return int(match[1]), int(match[2]), int(match[3])


def expected_version(text: str) -> str:
    """The package version CHANGELOG ``text`` calls for: its newest released version; while
    ``[Unreleased]`` has entries, the ``.dev0`` of the next minor (the next patch if they
    only fix)."""
    found = sections(text)
    released = [(version, date) for version, date, _groups in found if version != "Unreleased"]
    newest = _release(released[0][0])
    unreleased = next((groups for version, _d, groups in found if version == "Unreleased"), {})
    if not any(unreleased.values()):
        return released[0][0]
    major, minor, patch = newest
    if set(unreleased) - {"Fixed"}:
        return f"{major}.{minor + 1}.0.dev0"
    return f"{major}.{minor}.{patch + 1}.dev0"


def test_the_changelog_is_keep_a_changelog():
    """Unreleased first, then released versions newest first, each dated (ISO 8601), each
    with only Keep a Changelog's groups, none empty."""
    found = sections(CHANGELOG.read_text(encoding="utf-8"))
    assert [v for v, _d, _g in found].count("Unreleased") <= 1
    assert found[0][0] == "Unreleased" or all(v != "Unreleased" for v, _d, _g in found)
    released = [(v, d) for v, d, _g in found if v != "Unreleased"]
    assert released, "no released version"
    for version, date in released:
        assert _VERSION.fullmatch(version), version
        assert ".dev" not in version, version
        assert date, version
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", date), (version, date)
    versions = [_release(v) for v, _d in released]
    assert versions == sorted(versions, reverse=True)
    assert len(set(versions)) == len(versions)
    assert [d for _v, d in released] == sorted((d for _v, d in released), reverse=True)
    for version, _date, groups in found:
        assert all(groups.values()), f"{version}: an empty group"


def test_the_first_version_is_0_1_0_from_the_first_commit():
    """The history starts at 0.1.0 (the package's version from 2026-11-22 on)."""
    found = sections(CHANGELOG.read_text(encoding="utf-8"))
    assert found[-1][:2] == ("0.1.0", "2026-11-26")


def test_the_package_version_follows_the_changelog():
    """pyproject.toml, drover.__version__ and drover/_version.py say the version
    CHANGELOG.md calls for."""
    wanted = expected_version(CHANGELOG.read_text(encoding="utf-8"))
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["version"] == wanted
    assert drover.__version__ == _version.__version__ == wanted


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("## [Unreleased]\n\n## [0.1.0] - 2026-11-26\n### Added\n- x\n", "0.1.0"),
        (
            "## [Unreleased]\n### Fixed\n- y\n\n## [0.1.0] - 2026-11-26\n### Added\n- x\n",
            "0.1.1.dev0",
        ),
        (
            "## [Unreleased]\n### Added\n- y\n### Fixed\n- z\n\n## [0.1.2] - 2026-11-26\n",
            "0.2.0.dev0",
        ),
        ("## [0.2.0] - 2026-12-01\n### Added\n- y\n\n## [0.1.0] - 2026-11-26\n", "0.2.0"),
    ],
)
def test_the_version_rule(text, version):
    """The rule itself: a released version is itself; unreleased entries make the next minor's
    development release, or the next patch's when they only fix."""
    assert expected_version(text) == version


@pytest.mark.parametrize(
    "text",
    [
        "## [0.1.0] - 2026-11-26\n### Improved\n- x\n",
        "## [0.1.0] - 2026-11-26\n### Added\n- x\n### Added\n- y\n",
        "## [0.1.0] - 2026-11-26\n- x\n",
        "## 0.1.0\n",
    ],
)
def test_a_malformed_changelog_is_refused(text):
    """A group Keep a Changelog does not have, a group twice, an entry outside a group, a
    heading without brackets."""
    with pytest.raises(ValueError, match="line"):
        sections(text)
