"""The CI-sized kill campaign (``make chaos``): coordinators killed with -9, invariants hold."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SKIP_PG

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(SKIP_PG, reason="DROVER_TEST_SKIP_PG=1: the campaign needs PostgreSQL")
def test_the_ci_sized_kill_campaign_passes(tmp_path: Path):
    """`bench/chaos.py --quick`: at least 10 kills, a coordinator paused past its claims,
    kernels killed from outside, every invariant checked and holding (8 per database)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "chaos.py"), "--quick", "--tmpdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = done.stdout
    summary = out.strip().splitlines()[-1] if out.strip() else ""
    assert done.returncode == 0, out + done.stderr
    assert summary.startswith("16 passed, 0 failed"), out
    kills = int(summary.split("(")[1].split()[0])
    assert kills >= 10, out
    assert "spawned_twice                0" in out
    pauses = [int(line.split()[1]) for line in out.splitlines() if line.startswith("pauses ")]
    assert pauses[0] >= 1, out  # PostgreSQL: at least one coordinator paused past claim_ttl
    assert "destroyed_as_error           0" in out
    outside = [int(x.split()[1]) for x in out.splitlines() if x.startswith("killed_from_outside")]
    assert sum(outside) >= 1, out
