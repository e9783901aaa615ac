"""The demo behind ``make demo`` reaches the documented outcome for each session."""

from __future__ import annotations

import io

from rich.console import Console

from drover.demo import run_demo


async def test_demo_sessions_settle_as_documented(database):
    """Each demo session ends where the README says it does, and its history is printed."""
    out = io.StringIO()
    finals = await run_demo(
        database.url, Console(file=out, width=200), database_schema=database.schema
    )
    assert finals == {
        "hello": "TERMINATED",
        "two-kernels": "TERMINATED",
        "exits-non-zero": "TERMINATED",
        "setup-fails": "TERMINATED",
        "too-large": "PENDING",
        "stopped-by-user": "TERMINATED",
    }
    text = out.getvalue()
    assert "hello  [TERMINATED]  result=SUCCESS  status_info=KERNEL_EXITED" in text
    assert "exits-non-zero  [TERMINATED]  result=FAILURE  status_info=ABNORMAL_TERMINATION" in text
    assert "setup-fails  [TERMINATED]  result=FAILURE  status_info=START_FAILED" in text
    assert "stopped-by-user  [TERMINATED]  result=FAILURE  status_info=USER_REQUESTED" in text
    assert "insufficient resources: kernel 1/1 needs cpu=64" in text
