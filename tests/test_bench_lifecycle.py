"""bench/lifecycle.py's reading baseline reads what drover's handlers read, and runs.

The benchmark's numbers are only comparable while its hand-written steps match
the built-in lifecycle; these tests fail when a handler's declared statuses drift
from the baseline's copy, or when the baseline's statements stop moving every
session to TERMINATED.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "lifecycle.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_lifecycle", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


async def test_the_reading_baseline_reads_the_statuses_drovers_handlers_declare(bench, tmp_path):
    async with bench.make_harness(tmp_path / "handlers.db") as h:
        for name, (statuses, kernel_statuses) in bench.LIFECYCLE_READS.items():
            handler = h.handlers[name]
            assert set(statuses) == {str(s) for s in handler.target_session_statuses}, name
            assert set(kernel_statuses) == {str(s) for s in handler.target_kernel_statuses}, name
    # Every step the baseline times is either read as a lifecycle step or is a rule.
    for step in bench.STEPS:
        assert step.handler in bench.LIFECYCLE_READS or step.handler in bench.PROMOTION_RULES


@pytest.mark.parametrize("reads", [False, True], ids=["baseline", "reading"])
async def test_the_baselines_take_every_session_to_terminated(bench, tmp_path, reads):
    run = await bench.run_baseline(tmp_path, 40, 2, reads=reads)
    assert run.kind == ("reading" if reads else "baseline")
    # Seven steps, each moving all 40 sessions (the run raises if one moves fewer).
    assert run.transitions == 7 * 40
    assert run.kernel_changes == 3 * 40 * 2
    assert set(run.by_handler) == {s.handler for s in bench.STEPS}


async def test_the_contract_baseline_takes_every_session_to_terminated(bench, tmp_path):
    """Raw code with drover's contract (read targets and kernels, decide, compare-and-set)
    moves every session through the seven steps, and its CPU time is measured."""
    run = await bench.run_baseline(tmp_path, 40, 2, contract=True)
    assert run.kind == "contract"
    assert run.transitions == 7 * 40
    assert run.kernel_changes == 3 * 40 * 2
    assert run.cpu_seconds > 0


def test_the_cpu_summary_says_how_much_room_the_write_only_target_leaves(bench):
    """At 0.70 of a write-only baseline of 1.05 s drover may spend 1.50 s; raw code doing
    its reads and writes spends 1.39 s: 0.11 s are left for everything else."""

    def run(kind, cpu):
        return bench.ThroughputRun(kind, 10, 70_000, cpu, 0.0, cpu_seconds=cpu)

    runs = {
        "drover": [run("drover", 2.13), run("drover", 2.20), run("drover", 2.00)],
        "baseline": [run("baseline", 1.05)],
        "reading": [run("reading", 1.39)],
        "contract": [run("contract", 1.68)],
    }
    cpu = bench.summarize_cpu(runs)
    assert cpu["median_seconds"] == {
        "drover": 2.13,
        "baseline": 1.05,
        "reading": 1.39,
        "contract": 1.68,
    }
    assert cpu["room"]["allowed_seconds"] == pytest.approx(1.50)
    assert cpu["room"]["left_beyond_reading"] == pytest.approx(0.11)
    assert cpu["room"]["drover_beyond_reading"] == pytest.approx(0.74)
    assert cpu["ok"] == {"baseline": False, "contract": False}
    assert cpu["drover_to"]["contract"] == pytest.approx(1.68 / 2.13)
