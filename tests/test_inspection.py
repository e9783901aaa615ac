"""Inspection commands on data built through the harness, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import re
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from drover import AgentInfo, SessionStatus, SimulatedBackend
from drover.cli.group import main
from drover.testing import CoordinatorHarness

S = SessionStatus
DOCS = Path(__file__).parent.parent / "docs"


@pytest.fixture
def world(database, monkeypatch, tmp_path):
    """Sessions in known states, built with the harness on the real clock; a CLI runner."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DROVER_DATABASE_URL", database.url)
    monkeypatch.setenv("DROVER_LOAD_PLUGINS", "")  # built-ins only
    if database.schema:
        monkeypatch.setenv("DROVER_DATABASE_SCHEMA", database.schema)
    ids: dict[str, str] = {}

    async def build() -> None:
        backend = SimulatedBackend([AgentInfo("a1", {"cpu": 4, "mem": 4096})], run_for=None)
        async with CoordinatorHarness(
            database_url=database.url, database_schema=database.schema, backend=backend
        ) as h:
            h.clock._now = time.time()  # the CLI judges times with the real clock
            ids["stuck"] = await h.create_session(name="stuck", kernels=[{"cpu": 8}])
            ids["running"] = await h.create_session(name="running", kernels=[{"cpu": 1}])
            for _ in range(3):
                await h.run_until_settled()
            ids["done"] = await h.create_session(name="done", kernels=[{"cpu": 1}])
            await h.run_until_settled()
            await h.request_termination(ids["done"])
            await h.run_until_settled()
            ids["expired"] = await h.create_session(
                name="expired", status=S.PREPARING, kernels=[{"status": "PREPARING"}]
            )
            h.clock.advance(901)
            await h.tick("prepare-sessions")
            ids["preparing"] = await h.create_session(
                name="slow-pull",
                status=S.PREPARING,
                kernels=[{"status": "PULLING", "agent_id": "a1"}],
                spec={"options": {"prepare-sessions": {"timeout": 600}}},
            )

    asyncio.run(build())
    runner = CliRunner()

    def cli(*args: str):
        return runner.invoke(main, list(args), catch_exceptions=False)

    return ids, cli


def test_history_text_json_and_csv(world):
    """Rows in the order written, latest last, with the documented columns; filters; JSON
    and CSV."""
    ids, cli = world
    data = json.loads(cli("history", ids["running"], "--json").output)
    assert [(r["handler"], r["to_status"]) for r in data] == [
        ("api", "PENDING"),
        ("schedule-sessions", "SCHEDULED"),
        ("prepare-sessions", "PREPARING"),
        ("promote-to-prepared", "PREPARED"),
        ("start-sessions", "CREATING"),
        ("promote-to-running", "RUNNING"),
    ]
    assert (data[0]["result"], data[0]["message"]) == ("CREATED", "created by api")
    skips = json.loads(cli("history", ids["stuck"], "--json").output)[-1]["attempts"]
    assert skips >= 3  # one per schedule-sessions tick, merged into one row
    text = cli("history", ids["stuck"][:20]).output.splitlines()
    assert text[0].split("\t") == [
        "time", "kind", "entity", "handler", "result", "from → to", "attempts", "error code",
        "message",
    ]  # fmt: skip
    row = text[-1].split("\t")
    assert row[1:8] == [
        "session", ids["stuck"], "schedule-sessions", "SKIPPED", "PENDING → PENDING", str(skips),
        "insufficient-resources",
    ]  # fmt: skip
    skipped = json.loads(cli("history", "--result", "SKIPPED", "--json").output)
    assert {r["session_id"] for r in skipped} == {ids["stuck"]}
    by_api = json.loads(cli("history", "--handler", "api", "--kind", "session", "--json").output)
    # every session's CREATED row, and the one termination request (latest last); the
    # kernels created with them have their own CREATED rows (kind kernel)
    assert [(r["session_id"], r["result"]) for r in by_api] == [
        (ids["stuck"], "CREATED"),
        (ids["running"], "CREATED"),
        (ids["done"], "CREATED"),
        (ids["done"], "SUCCESS"),
        (ids["expired"], "CREATED"),
        (ids["preparing"], "CREATED"),
    ]
    rows = list(csv.reader(io.StringIO(cli("history", ids["done"], "--csv").output)))
    assert rows[0][0] == "time"
    assert rows[-1][3] == "terminate-sessions"  # a running session's kernels were destroyed
    limited = json.loads(cli("history", "--limit", "2", "--json").output)
    everything = json.loads(cli("history", "--limit", "1000", "--json").output)
    assert limited == everything[-2:]  # the latest two, latest last
    old = cli("history", "--since", "2000-01-01T00:00", "--until", "2000-01-02T00:00", "--json")
    assert json.loads(old.output) == []
    bad = cli("history", "--since", "yesterday")
    assert bad.exit_code == 2
    assert "neither a duration" in bad.output


def test_history_is_in_one_order_everywhere(world):
    """Issue 35: `show`, `history` and their JSON list rows by id, latest last, and the
    times written never go back; --reverse is newest first."""
    ids, cli = world
    shown = json.loads(cli("show", ids["done"], "--json", "--history", "100").output)["history"]
    listed = json.loads(cli("history", ids["done"], "--json").output)
    assert [r["id"] for r in shown] == [r["id"] for r in listed]
    everything = json.loads(cli("history", "--limit", "1000", "--json").output)
    assert [r["id"] for r in everything] == sorted(r["id"] for r in everything)
    times = [r["created_at"] for r in everything]
    assert times == sorted(times)
    reverse = json.loads(cli("history", "--limit", "1000", "--json", "--reverse").output)
    assert reverse == everything[::-1]
    text = cli("history", ids["done"], "--reverse").output.splitlines()
    assert text[1].split("\t")[3] == "terminate-sessions"
    both = cli("history", "--follow", "--reverse")
    assert both.exit_code == 2
    assert both.output.startswith("Error: --follow")
    assert len(both.output.splitlines()) == 1


def test_history_rows_name_the_entity_for_what_it_is(world):
    """Issue 35: a kernel's row is `entity_id` + `kind` kernel, with no `session_id`; a
    session's row keeps `session_id` (the same id)."""
    ids, cli = world
    kernels = json.loads(cli("history", "--kind", "kernel", "--json", "--limit", "1000").output)
    assert kernels
    assert all(r["kind"] == "kernel" and "session_id" not in r for r in kernels)
    shown = json.loads(cli("show", ids["running"], "--json").output)
    mine = [r for r in kernels if r["entity_id"] == shown["kernels"][0]["id"]]
    assert [r["result"] for r in mine] == ["CREATED"]
    sessions = json.loads(cli("history", "--kind", "session", "--json").output)
    assert all(r["session_id"] == r["entity_id"] for r in sessions)
    text = cli("history", "--kind", "kernel").output.splitlines()
    assert text[0].split("\t")[1:3] == ["kind", "entity"]
    assert text[-1].split("\t")[1] == "kernel"


@pytest.mark.parametrize(
    ("args", "start"),
    [
        (["--result", "BOGUS"], "Error: --result 'BOGUS': not a result (SUCCESS, "),
        (["--handler", "no-such-handler"], "Error: --handler 'no-such-handler': no handler"),
        (["--kind", "gadget"], "Error: --kind 'gadget': no such kind; kinds: "),
    ],
)
def test_history_refuses_unknown_filters(world, args, start):
    """Issue 35: an unknown result, handler or kind is refused in one line, exit 2 (it
    printed an empty table and exited 0)."""
    _ids, cli = world
    refused = cli("history", *args)
    assert refused.exit_code == 2, refused.output
    assert refused.output.startswith(start), refused.output
    assert len(refused.output.splitlines()) == 1


def test_history_accepts_what_the_history_can_hold(world):
    """A loaded handler that never wrote, a named outcome declared by none but found in the
    history, and the result classes in any case, are all accepted."""
    _ids, cli = world
    for args in (
        ["--handler", "detect-termination"],
        ["--result", "need_retry"],
        ["--result", "EXPIRED"],
        ["--handler", "api", "--result", "CREATED"],
    ):
        found = cli("history", *args, "--json")
        assert found.exit_code == 0, (args, found.output)


def test_history_of_a_kernel(world):
    """--kernel shows that kernel's own status changes, latest last."""
    ids, cli = world
    shown = json.loads(cli("show", ids["running"], "--json").output)
    kernel = shown["kernels"][0]["id"]
    rows = json.loads(cli("history", "--kernel", kernel, "--json").output)
    assert [(r["source"], r["to_status"]) for r in rows][-2:] == [
        ("start-sessions", "CREATING"),
        ("backend", "RUNNING"),
    ]


def test_why_explains_a_stuck_and_skipped_session(world):
    """PENDING for lack of resources: owner, tries, the skip reason, kernels, what moves it."""
    ids, cli = world
    skips = json.loads(cli("history", ids["stuck"], "--json").output)[-1]["attempts"]
    lines = cli("why", ids["stuck"]).output.splitlines()
    assert re.match(r"stuck \(.+\) is PENDING, for \d", lines[0])
    assert lines[1] == "schedule-sessions owns PENDING (no timeout); tries 0 (max_retries 5)"
    assert lines[2] == (
        f"last: skipped {skips} times by schedule-sessions: insufficient resources: "
        "kernel 1/1 needs cpu=8 mem=0, the largest free agent a1 has cpu=3 mem=4096 "
        "(no agent is that large even when idle)"
    )
    assert lines[3] == "kernels: k1 PENDING"
    # Issue 35: what acts next is the scheduler, not detect-start-failure (whose
    # condition, a kernel that ended, does not hold: it is only watched).
    assert (
        lines[4] == "next: schedule-sessions acts on it at its next tick (→ SCHEDULED on success)"
    )
    assert lines[5].startswith("watching: detect-start-failure → TERMINATING: acts as soon as")
    assert [line for line in lines if line.startswith("next:")] == [lines[4]]
    data = json.loads(cli("why", ids["stuck"], "--json").output)
    assert data["last_problem"]["attempts"] == skips
    assert data["owners"][0]["handler"] == "schedule-sessions" or any(
        o["handler"] == "schedule-sessions" for o in data["owners"]
    )


def test_why_for_a_waiting_promotion_and_a_timeout(world):
    """PREPARING with a pulling kernel: expiry countdown and the blocking kernel."""
    ids, cli = world
    text = cli("why", ids["preparing"]).output
    assert re.search(
        r"prepare-sessions owns PREPARING; expires in \d+m\d+s \(timeout 10m00s\)", text
    )
    assert "promote-to-prepared → PREPARED: waits until no kernel is in" in text
    assert "k1 is PULLING" in text
    # prepare-sessions fetches it (it checks the pull): it acts next; the promotions wait.
    assert "\nnext: prepare-sessions acts on it at its next tick" in text
    assert "\nwatching: promote-to-prepared → PREPARED" in text


def test_why_for_an_expired_session(world):
    """Sent back to PENDING by expiry: the EXPIRED reason is the last problem."""
    ids, cli = world
    text = cli("why", ids["expired"]).output
    assert "is PENDING" in text
    assert "last: expired once by prepare-sessions: in PREPARING for 901s (timeout=900s)" in text


def test_why_for_running_and_terminal_sessions(world):
    """RUNNING: what ends it; TERMINATED: how and why it ended."""
    ids, cli = world
    running = cli("why", ids["running"]).output
    assert "detect-termination → TERMINATING: acts as soon as any kernel is in" in running
    assert "none is yet" in running
    done = cli("why", ids["done"]).output.splitlines()
    assert "is TERMINATED" in done[0]
    assert done[1].startswith("it ended by ")
    assert done[2] == "result CANCELLED; status_info USER_REQUESTED (a termination was requested)"


@pytest.mark.parametrize("status", list(SessionStatus))
def test_why_gives_an_answer_for_every_status(database, monkeypatch, tmp_path, status):
    """Every status gets a diagnosis that names it and the kernels."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DROVER_DATABASE_URL", database.url)
    monkeypatch.setenv("DROVER_LOAD_PLUGINS", "")
    if database.schema:
        monkeypatch.setenv("DROVER_DATABASE_SCHEMA", database.schema)

    async def build() -> str:
        async with CoordinatorHarness(
            database_url=database.url, database_schema=database.schema
        ) as h:
            return await h.create_session(status=status, kernels=[{"status": status.value}])

    sid = asyncio.run(build())
    result = CliRunner().invoke(main, ["why", sid])
    assert result.exit_code == 0, result.output
    assert f"is {status.value}, for" in result.output
    assert f"kernels: k1 {status.value}" in result.output


def test_stats_per_status_and_per_handler(world, database):
    """Per status: counts and ages; per handler: ticks recorded by the daemon."""
    _ids, cli = world

    async def record() -> None:
        async with CoordinatorHarness(
            database_url=database.url, database_schema=database.schema
        ) as h:
            now = time.time()
            await h.repository.record_ticks(
                [
                    {
                        "handler": "schedule-sessions",
                        "started_at": now,
                        "duration": d,
                        "fetched": 2,
                        "counts": {"SUCCESS": 1, "SKIPPED": 1},
                    }
                    for d in (0.010, 0.020, 0.030, 0.040)
                ]
            )

    asyncio.run(record())
    data = json.loads(cli("stats", "--json").output)
    (sched,) = data["handlers"]
    assert (sched["handler"], sched["ticks"], sched["results"]) == (
        "schedule-sessions",
        4,
        {"SKIPPED": 4, "SUCCESS": 4},
    )
    assert 0.02 <= sched["p50_tick_s"] <= 0.03
    assert 0.035 <= sched["p95_tick_s"] <= 0.04
    statuses = {s["status"]: s for s in data["statuses"]}
    assert statuses["PENDING"]["sessions"] == 2
    assert statuses["RUNNING"]["sessions"] == 1
    assert statuses["TERMINATED"]["sessions"] == 1
    text = cli("stats").output
    assert "schedule-sessions\t4\tSKIPPED=4 SUCCESS=4\t" in text
    assert json.loads(cli("stats", "--since", "1m", "--json").output)["handlers"][0]["ticks"] == 4


def test_prune_keeps_what_it_must(world, database):
    """Only ended sessions' old rows go; live sessions keep every row, latest included."""
    ids, cli = world
    before = {
        k: len(json.loads(cli("history", v, "--json", "--limit", "100").output))
        for k, v in ids.items()
    }
    dry = json.loads(cli("history", "prune", "--older-than", "0s", "--dry-run", "--json").output)
    assert dry["dry_run"] is True
    # The ended session's rows, and its kernels' own (their CREATED rows).
    kernels = len(json.loads(cli("show", ids["done"], "--json").output)["kernels"])
    assert dry["deleted"]["scheduling_history"] == before["done"] + kernels
    after_dry = {k: len(json.loads(cli("history", v, "--json").output)) for k, v in ids.items()}
    assert after_dry == before
    result = cli("history", "prune", "--older-than", "0s")
    assert f"deleted {before['done'] + kernels} row(s) of scheduling_history" in result.output
    after = {k: len(json.loads(cli("history", v, "--json").output)) for k, v in ids.items()}
    assert after == {**before, "done": 0}
    recent = cli("history", "prune", "--older-than", "30d")
    assert "deleted 0 row(s) of scheduling_history" in recent.output
    assert cli("history", "prune", "--older-than", "soon").exit_code == 2


def test_prune_reports_progress_per_batch_and_reads_1h30m(world):
    """Each batch is a transaction with a progress line on stderr; 1h30m is a duration."""
    _ids, cli = world
    dry = json.loads(cli("history", "prune", "--older-than", "1h30m", "--dry-run", "--json").output)
    assert dry["older_than_s"] == 5400
    everything = cli("history", "prune", "--older-than", "0s", "--dry-run", "--json").output
    before = json.loads(everything)["deleted"]["scheduling_history"]
    assert before > 4
    result = cli("history", "prune", "--older-than", "0s", "--batch-size", "2")
    assert result.exit_code == 0, result.output
    progress = [line for line in result.stderr.splitlines() if "so far" in line]
    assert progress[:2] == [
        "scheduling_history: 2 row(s) deleted so far",
        "scheduling_history: 4 row(s) deleted so far",
    ]
    assert f"deleted {before} row(s) of scheduling_history" in result.stdout
    assert "so far" not in result.stdout


def test_graph_of_the_builtin_set():
    """The built-in graph, as text, mermaid, dot and JSON."""
    runner = CliRunner()
    env = {"DROVER_LOAD_PLUGINS": ""}
    text = runner.invoke(main, ["graph"], env=env).output
    assert "PENDING     -> SCHEDULED    [schedule-sessions: success]" in text
    assert "RUNNING     -> TERMINATING  [detect-termination: promotion]" in text
    mermaid = runner.invoke(main, ["graph", "--format", "mermaid"], env=env).output
    assert mermaid.startswith("stateDiagram-v2\n    [*] --> PENDING\n")
    assert "    PREPARING --> PENDING : prepare-sessions#58; expired" in mermaid
    dot = runner.invoke(main, ["graph", "--format", "dot"], env=env).output
    assert '"SCHEDULED" -> "PREPARING" [label="prepare-sessions: success"];' in dot
    data = json.loads(runner.invoke(main, ["graph", "--format", "json"], env=env).output)
    assert len(data["nodes"]) == len(SessionStatus)
    assert {"source": "CREATING", "target": "RUNNING", "handler": "promote-to-running",
            "outcome": "promotion"} in data["edges"]  # fmt: skip


def test_graph_includes_plugin_handlers():
    """An installed plugin's handler (the example package) appears in the graph."""
    text = CliRunner().invoke(main, ["graph"], env={}).output
    assert "RUNNING     -> TERMINATING  [enforce-max-duration: success]" in text
    hidden = CliRunner().invoke(main, ["graph"], env={"DROVER_DISABLE_PLUGINS": "max-duration"})
    assert "enforce-max-duration" not in hidden.output


def test_the_docs_state_diagram_is_generated_by_drover_graph():
    """docs/architecture.md's state machine is `drover graph --format mermaid`, verbatim."""
    generated = (
        CliRunner()
        .invoke(main, ["graph", "--format", "mermaid"], env={"DROVER_LOAD_PLUGINS": ""})
        .output.strip()
    )
    text = (DOCS / "architecture.md").read_text()
    marker = "<!-- generated: drover graph --format mermaid -->\n```mermaid\n"
    assert marker in text, "architecture.md lost its generated diagram"
    block = text.split(marker, 1)[1].split("```", 1)[0].strip()
    assert block == generated


def test_status_age_percentiles_are_ordered(database):
    """p50 <= p95, computed from the right end of the ordering."""

    async def check() -> None:
        async with CoordinatorHarness(
            database_url=database.url, database_schema=database.schema
        ) as h:
            for _ in range(20):
                await h.create_session()
                h.clock.advance(10)
            ages = await h.repository.status_ages(h.clock.time())
            n, p50, p95 = ages[S.PENDING]
            assert n == 20
            assert 100 <= p50 <= 110  # ages are 10, 20, ... 200 (nearest rank)
            assert 185 <= p95 <= 200

    asyncio.run(check())
