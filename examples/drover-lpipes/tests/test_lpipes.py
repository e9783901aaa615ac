"""Acceptance tests of the Language Pipes pack, from the seed's FSM, on SQLite and PostgreSQL.

Every test builds its own plugin (a fresh simulated pipe) and gives it to
drover's ``CoordinatorHarness``; entry points stay off, so the tests mean the
same whether or not the pack is installed.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import tomllib
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from click.testing import CliRunner
from drover_lpipes import (
    HOP_KIND,
    JOB_KIND,
    STALE_AFTER,
    HopState,
    JobRequest,
    JobState,
    LanguagePipesPlugin,
    Node,
    Pipe,
    Reason,
    client_gone,
    reference,
    submit,
)
from drover_lpipes.client import CLIENT_SOURCE
from drover_lpipes.handlers import context_of
from drover_lpipes.measure import drive, measure
from drover_lpipes.pipe import EOS, HandOff, detokenize, embed, tokenize
from sqlalchemy.util import await_only

from drover import Entity
from drover.coordinator.daemon import Daemon
from drover.testing import (
    CoordinatorHarness,
    TestDatabase,
    asyncpg_dsn,
    pg_schema,
    pg_skipped,
    pg_url,
)

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
LAYERS = 30  # the default pipe: a (0-9, end model), b (10-19), c (20-29)
STEPS = ("lp-validate", "lp-embed", "lp-process-layers", "lp-head", "lp-send")


Harness = Callable[..., CoordinatorHarness]


@pytest.fixture
def lp(drover_database: TestDatabase) -> Harness:
    """A harness with only this pack loaded (its plugin is ``h.lp``, its pipe ``h.lp.pipe``)."""

    def make(**options: Any) -> CoordinatorHarness:
        plugin = LanguagePipesPlugin()
        h = CoordinatorHarness(
            plugins=[plugin],
            include_builtin_handlers=False,
            handler_options=options,
            database_url=drover_database.url,
            database_schema=drover_database.schema,
        )
        h.lp = plugin  # type: ignore[attr-defined]
        return h

    return make


def _pipe(h: CoordinatorHarness) -> Any:
    return h.lp.pipe  # type: ignore[attr-defined]


async def _hops(h: CoordinatorHarness, job: str) -> list[Entity]:
    """The job's hops, in hand-off order."""
    return sorted((await h.get(job)).children, key=lambda hop: int(hop.spec["seq"]))


async def _moves(h: CoordinatorHarness, entity: str) -> list[tuple[str, str, str, str]]:
    return [
        (r.handler, str(r.result), str(r.from_status), str(r.to_status))
        for r in await h.history(entity)
    ]


async def _tick(h: CoordinatorHarness, *names: str) -> None:
    for name in names:
        await h.tick(name)


# The hops of one token with the default (fused) embedding, after the first one.
ORIGIN_HOP = [
    ("lp-send", "CREATED", "VALIDATING", "VALIDATING"),
    ("lp-validate", "head", "VALIDATING", "HEAD"),
    ("lp-head", "local", "HEAD", "PROCESS_LAYERS"),
    ("lp-process-layers", "remote", "PROCESS_LAYERS", "SEND"),
    ("lp-send", "handed-off", "SEND", "DONE"),
]
LAYER_HOP = [
    ("lp-send", "CREATED", "VALIDATING", "VALIDATING"),
    ("lp-validate", "layers", "VALIDATING", "PROCESS_LAYERS"),
    ("lp-process-layers", "remote", "PROCESS_LAYERS", "SEND"),
    ("lp-send", "handed-off", "SEND", "DONE"),
]


async def test_a_job_runs_every_layer_on_every_node_and_completes_with_the_reference_tokens(
    lp: Harness,
) -> None:
    async with lp() as h:
        prompt = "what does the pipe carry"
        job = await submit(h.repository, JobRequest(prompt, max_tokens=3))
        await h.run_until_settled()
        expected = reference(prompt, LAYERS, 3)
        e = await h.get(job)
        assert (e.status, e.status_info, e.result) == ("COMPLETED", None, "SUCCESS")
        assert e.data == {"tokens": expected, "text": detokenize(expected)}
        hops = await _hops(h, job)
        # a → b → c → a for each token; the last token ends on the origin.
        assert [hop.spec["node"] for hop in hops] == ["a", "b", "c"] * 3 + ["a"]
        assert [hop.status for hop in hops] == ["DONE"] * 10
        assert [hop.status_info for hop in hops] == ["HANDED_OFF"] * 9 + ["COMPLETED"]
        assert [hop.result for hop in hops] == ["SUCCESS"] * 10
        # One handler per state, the successors as named outcomes.
        assert await _moves(h, hops[0].id) == [
            ("api", "CREATED", "VALIDATING", "VALIDATING"),
            ("lp-validate", "embed", "VALIDATING", "EMBED"),
            ("lp-embed", "local", "EMBED", "PROCESS_LAYERS"),
            ("lp-process-layers", "remote", "PROCESS_LAYERS", "SEND"),
            ("lp-send", "handed-off", "SEND", "DONE"),
        ]
        assert await _moves(h, hops[1].id) == LAYER_HOP
        assert await _moves(h, hops[2].id) == LAYER_HOP
        assert await _moves(h, hops[3].id) == ORIGIN_HOP
        assert await _moves(h, hops[9].id) == [
            ("lp-send", "CREATED", "VALIDATING", "VALIDATING"),
            ("lp-validate", "head", "VALIDATING", "HEAD"),
            ("lp-head", "completed", "HEAD", "DONE"),
        ]
        assert await _moves(h, job) == [
            ("api", "CREATED", "RUNNING", "RUNNING"),
            ("lp-finish", "completed", "RUNNING", "COMPLETED"),
        ]
        pipe = _pipe(h)
        assert pipe.layers_run[job] == list(range(LAYERS)) * 3  # every layer once per token
        assert pipe.updates[job] == [("token", t) for t in expected]
        assert [(s.source, s.destination, s.step) for s in pipe.sent] == [
            ("a", "b", "LAYER"),
            ("b", "c", "LAYER"),
            ("c", "a", "HEAD"),
        ] * 3


async def test_the_jobs_context_is_saved_with_each_move_and_carried_by_each_hand_off(
    lp: Harness,
) -> None:
    async with lp() as h:
        prompt = "one two three"
        job = await submit(h.repository, JobRequest(prompt, max_tokens=2))
        (first,) = await _hops(h, job)
        assert context_of(first) == first.spec["context"]
        assert first.data is None  # nothing saved before its first move

        await h.tick("lp-validate")
        (first,) = await _hops(h, job)
        assert first.status == "EMBED"
        assert first.data == {"context": first.spec["context"]}  # saved, not yet tokenized
        assert "prompt_ids" not in first.data["context"]

        await h.tick("lp-embed")  # tokenized and embedded, saved with the move
        (first,) = await _hops(h, job)
        ctx = first.data["context"]
        hidden, kv = embed(tokenize(prompt), 0)
        assert first.status == "PROCESS_LAYERS"
        assert (ctx["prompt_ids"], ctx["prefilled"], ctx["hidden"], ctx["kv"]) == (
            tokenize(prompt),
            3,
            hidden,
            kv,
        )
        assert (ctx["step"], ctx["layer"]) == ("LAYER", 0)

        await h.tick("lp-process-layers")  # layers 0-9 ran on a
        (first,) = await _hops(h, job)
        assert (first.status, first.data["context"]["layer"], first.data["context"]["to"]) == (
            "SEND",
            10,
            "b",
        )
        await h.tick("lp-send")
        first, second = await _hops(h, job)
        # The hand-off's payload is the context as the sender saved it.
        assert second.spec == {"node": "b", "seq": 1, "context": first.data["context"]}
        assert "to" not in second.spec["context"]
        await h.run_until_settled()
        # Each hop's saved context is the next one's payload, all the way round.
        hops = await _hops(h, job)
        for sender, receiver in itertools.pairwise(hops):
            assert receiver.spec["context"] == sender.data["context"]
        assert hops[-1].data["context"]["tokens"] == reference(prompt, LAYERS, 2)


async def test_a_hand_off_creates_the_next_hop_in_the_same_transaction(lp: Harness) -> None:
    async with lp() as h:
        job = await submit(h.repository, JobRequest("atomic hand off", max_tokens=1))
        await _tick(h, "lp-validate", "lp-embed", "lp-process-layers")

        def fail(step: str) -> None:
            if step == "before-history":  # the hop is DONE and the next one inserted: roll back
                raise RuntimeError("the database went away")

        h.coordinator.inject_apply_failure = fail
        with pytest.raises(RuntimeError, match="went away"):
            await h.tick("lp-send")
        (hop,) = await _hops(h, job)
        assert hop.status == "SEND"  # neither the move nor the new hop was written
        assert [m[0] for m in await _moves(h, hop.id)][-1] == "lp-process-layers"

        h.coordinator.inject_apply_failure = None
        await h.tick("lp-send")
        first, second = await _hops(h, job)
        (ended,) = [r for r in await h.history(first.id) if r.handler == "lp-send"]
        (created,) = await h.history(second.id)
        assert (first.status, first.status_info, second.status) == (
            "DONE",
            "HANDED_OFF",
            "VALIDATING",
        )
        assert (created.handler, created.result, created.message) == (
            "lp-send",
            "CREATED",
            f"created by lp-send for {first.id}",
        )
        assert created.created_at == ended.created_at  # one transaction, one time


async def test_chunked_prefill_goes_round_the_pipe_per_chunk_and_reports_progress(
    lp: Harness,
) -> None:
    async with lp() as h:
        prompt = "a prompt of five words"
        job = await submit(h.repository, JobRequest(prompt, max_tokens=2, chunk=2))
        await h.run_until_settled()
        e = await h.get(job)
        assert (e.status, e.data["tokens"]) == ("COMPLETED", reference(prompt, LAYERS, 2))
        assert _pipe(h).updates[job][:3] == [("prefill", 2), ("prefill", 4), ("prefill", 5)]
        hops = await _hops(h, job)
        origin = [await _moves(h, hop.id) for hop in hops if hop.spec["node"] == "a"]
        # Chunks 2 and 3 come back to the origin at a HEAD step with more prefill: EMBED.
        assert [m[1][1] for m in origin[:4]] == ["embed", "embed", "embed", "head"]
        assert len(hops) == 3 * 3 + 3 + 1  # three prefill passes, a token pass, the last head


async def test_without_fused_embedding_the_head_hands_the_token_to_embed(lp: Harness) -> None:
    async with lp() as h:
        job = await submit(h.repository, JobRequest("step by step", max_tokens=2, fuse_embed=False))
        await h.run_until_settled()
        e = await h.get(job)
        assert (e.status, e.data["tokens"]) == ("COMPLETED", reference("step by step", LAYERS, 2))
        origin = (await _hops(h, job))[3]
        assert await _moves(h, origin.id) == [
            ("lp-send", "CREATED", "VALIDATING", "VALIDATING"),
            ("lp-validate", "head", "VALIDATING", "HEAD"),
            ("lp-head", "embed", "HEAD", "EMBED"),
            ("lp-embed", "local", "EMBED", "PROCESS_LAYERS"),
            ("lp-process-layers", "remote", "PROCESS_LAYERS", "SEND"),
            ("lp-send", "handed-off", "SEND", "DONE"),
        ]


async def test_an_eos_token_completes_the_job_before_max_tokens(lp: Harness) -> None:
    async with lp() as h:
        job = await submit(h.repository, JobRequest("stop early", max_tokens=50, stop_after=2))
        await h.run_until_settled()
        e = await h.get(job)
        tokens = reference("stop early", LAYERS, 50, stop_after=2)
        assert tokens[-1] == EOS
        assert len(tokens) == 3
        assert (e.status, e.result, e.data["tokens"]) == ("COMPLETED", "SUCCESS", tokens)


async def test_a_node_with_more_than_one_segment_runs_them_as_process_layers_again(
    lp: Harness,
) -> None:
    async with lp() as h:
        pipe = _pipe(h)
        pipe.nodes["b"].segments = [(10, 15), (15, 20)]
        job = await submit(h.repository, JobRequest("two segments", max_tokens=1))
        await h.run_until_settled()
        e = await h.get(job)
        assert (e.status, e.data["tokens"]) == ("COMPLETED", reference("two segments", LAYERS, 1))
        on_b = (await _hops(h, job))[1]
        assert await _moves(h, on_b.id) == [
            ("lp-send", "CREATED", "VALIDATING", "VALIDATING"),
            ("lp-validate", "layers", "VALIDATING", "PROCESS_LAYERS"),
            ("lp-process-layers", "local", "PROCESS_LAYERS", "PROCESS_LAYERS"),
            ("lp-process-layers", "remote", "PROCESS_LAYERS", "SEND"),
            ("lp-send", "handed-off", "SEND", "DONE"),
        ]


async def _failed_with(h: CoordinatorHarness, job: str, reason: Reason) -> Entity:
    e = await h.get(job)
    assert (e.status, e.status_info, e.result) == ("FAILED", reason, "FAILURE")
    last = (await _hops(h, job))[-1]
    assert (last.status, last.status_info, last.result) == ("DONE", reason, "FAILURE")
    assert (await _moves(h, job))[-1] == ("lp-finish", "failed", "RUNNING", "FAILED")
    return last


async def test_validation_failures_end_the_hop_and_fail_the_job_with_the_reason(
    lp: Harness,
) -> None:
    async with lp() as h:
        pipe = _pipe(h)
        # The origin has no end model.
        headless = await submit(h.repository, JobRequest("no head here", origin="b"))
        await h.run_until_settled()
        last = await _failed_with(h, headless, Reason.NO_END_MODEL)
        assert (await _moves(h, last.id))[-1] == ("lp-validate", "invalid", "VALIDATING", "DONE")

        # A HEAD step handed to a node that is not the job's origin.
        ctx = JobRequest("wrong node").context()
        misrouted = await h.create(
            JOB_KIND,
            JobState.RUNNING,
            children=[
                {"status": HopState.VALIDATING, "spec": {"node": "c", "seq": 0, "context": ctx}}
            ],
        )
        # A hand-off whose payload carries no job.
        lost = await h.create(
            JOB_KIND,
            JobState.RUNNING,
            children=[{"status": HopState.VALIDATING, "spec": {"node": "b", "seq": 0}}],
        )
        await h.run_until_settled()
        await _failed_with(h, misrouted, Reason.ORIGIN_MISMATCH)
        await _failed_with(h, lost, Reason.JOB_MISSING)

        # A node is down: the pipe is incomplete.
        pipe.nodes["c"].up = False
        incomplete = await submit(h.repository, JobRequest("half a pipe"))
        await h.run_until_settled()
        await _failed_with(h, incomplete, Reason.PIPE_INCOMPLETE)
        assert _pipe(h).sent == []


async def test_a_hop_without_its_jobs_context_ends_job_missing_in_any_state(
    lp: Harness,
) -> None:
    async with lp() as h:
        jobs = {
            state: await h.create(
                JOB_KIND,
                JobState.RUNNING,
                children=[{"status": state, "spec": {"node": "a", "seq": 0}}],
            )
            for state in HopState
            if state != HopState.DONE
        }
        await h.run_until_settled()
        for job in jobs.values():
            await _failed_with(h, job, Reason.JOB_MISSING)
        assert _pipe(h).sent == []


async def test_no_local_segment_for_the_next_layer_ends_the_hop_no_model(lp: Harness) -> None:
    async with lp() as h:
        ctx = {**JobRequest("mid layer").context(), "step": "LAYER", "layer": 5, "hidden": 1}
        job = await h.create(
            JOB_KIND,
            JobState.RUNNING,
            children=[
                {"status": HopState.PROCESS_LAYERS, "spec": {"node": "b", "seq": 0, "context": ctx}}
            ],
        )
        await h.run_until_settled()
        last = await _failed_with(h, job, Reason.NO_MODEL)
        assert (await _moves(h, last.id))[-1] == (
            "lp-process-layers",
            "no-model",
            "PROCESS_LAYERS",
            "DONE",
        )


async def test_a_job_whose_node_stops_answering_is_stale_after_60_seconds(lp: Harness) -> None:
    async with lp() as h:
        pipe = _pipe(h)
        job = await submit(h.repository, JobRequest("into the void", max_tokens=4))
        await _tick(h, "lp-validate", "lp-embed", "lp-process-layers", "lp-send")
        on_b = (await _hops(h, job))[1]
        assert (on_b.spec["node"], on_b.status) == ("b", "VALIDATING")
        pipe.nodes["b"].up = False  # b crashed holding the job
        await h.run_until_settled()
        assert (await h.get(on_b.id)).status == "VALIDATING"  # nothing runs it; not stale yet
        h.clock.advance(STALE_AFTER - 1)
        await h.run_until_settled()
        assert (await h.get(on_b.id)).status == "VALIDATING"
        h.clock.advance(2)
        await h.run_until_settled()
        last = await _failed_with(h, job, Reason.STALE)
        assert last.id == on_b.id
        # Only lp-stale ever fetched it: lp-validate's filter keeps a down node's hops out.
        assert [m[:2] for m in await _moves(h, on_b.id)] == [
            ("lp-send", "CREATED"),
            ("lp-stale", "stale"),
        ]
        (row,) = [r for r in await h.history(on_b.id) if r.handler == "lp-stale"]
        assert row.message == "no progress in VALIDATING on node b for 60s"


async def test_a_busy_job_is_never_stale(lp: Harness) -> None:
    async with lp() as h:
        job = await submit(h.repository, JobRequest("slow but steady", max_tokens=3))
        for _ in range(20):  # every hop moves within 60 s, the job takes far longer
            h.clock.advance(30)
            await _tick(h, *STEPS, "lp-stale", "lp-finish")
        e = await h.get(job)
        assert (e.status, e.data["tokens"]) == (
            "COMPLETED",
            reference("slow but steady", LAYERS, 3),
        )


async def test_a_client_gone_fails_the_job_by_report_and_no_hop_follows(lp: Harness) -> None:
    async with lp() as h:
        pipe = _pipe(h)
        job = await submit(h.repository, JobRequest("are you still there", max_tokens=5))
        await _tick(h, "lp-validate", "lp-embed", "lp-process-layers", "lp-send", "lp-validate")
        live = (await _hops(h, job))[-1]
        assert (live.spec["node"], live.status) == ("b", "PROCESS_LAYERS")
        assert await client_gone(h.repository, pipe, job)
        e = await h.get(job)
        assert (e.status, e.status_info, e.result) == ("FAILED", "CLIENT_GONE", "FAILURE")
        assert (await _moves(h, job))[-1] == (CLIENT_SOURCE, "MOVED", "RUNNING", "FAILED")
        ended = await h.get(live.id)
        assert ended.status == "DONE"  # the job's end ended its live hop
        assert (await _moves(h, live.id))[-1] == (CLIENT_SOURCE, "MOVED", "PROCESS_LAYERS", "DONE")
        await h.run_until_settled()
        assert len(await _hops(h, job)) == 2
        assert len(pipe.sent) == 1
        assert not await client_gone(h.repository, pipe, job)  # already ended: nothing written


async def test_a_client_gone_before_its_report_fails_the_heads_update(lp: Harness) -> None:
    async with lp() as h:
        pipe = _pipe(h)
        job = await submit(h.repository, JobRequest("hang up", max_tokens=5))
        pipe.gone.add(job)  # the connection dropped; the report has not arrived
        await h.run_until_settled()
        last = await _failed_with(h, job, Reason.CLIENT_GONE)
        assert (await _moves(h, last.id))[-1] == ("lp-head", "update-failed", "HEAD", "DONE")
        assert last.data["context"]["tokens"] == reference("hang up", LAYERS, 1)


async def test_a_cancel_that_wins_the_race_with_a_hand_off_drops_the_next_hop(
    lp: Harness,
) -> None:
    """The client cancels while lp-send is sending (execute, no transaction open): the
    cancel commits first, the hand-off's compare-and-set fails, no hop is created."""
    async with lp() as h:
        pipe = _pipe(h)
        job = await submit(h.repository, JobRequest("cancel me", max_tokens=5))
        await _tick(h, "lp-validate", "lp-embed", "lp-process-layers")

        async def cancel_meanwhile(hand_off: HandOff) -> None:
            outcome = await h.request_termination(hand_off.job_id)
            assert (outcome.from_status, outcome.to_status) == ("RUNNING", "CANCELLED")

        pipe.on_send = cancel_meanwhile
        report = await h.tick("lp-send")
        assert [(c.result, c.error_code) for c in report.changes] == [("SKIPPED", "stale-status")]
        e = await h.get(job)
        assert (e.status, e.status_info, e.result) == ("CANCELLED", "CANCELLED", "CANCELLED")
        (hop,) = await _hops(h, job)  # no next hop
        assert hop.status == "DONE"
        assert (await _moves(h, hop.id))[-1] == ("api", "MOVED", "SEND", "DONE")
        assert len(pipe.sent) == 1  # the message went out; the next node has no hop to run
        pipe.on_send = None
        await h.run_until_settled()
        assert len(await _hops(h, job)) == 1


async def test_a_cancel_that_loses_the_race_with_a_hand_off_ends_the_new_hop(lp: Harness) -> None:
    async with lp() as h:
        job = await submit(h.repository, JobRequest("too late", max_tokens=5))
        await _tick(h, "lp-validate", "lp-embed", "lp-process-layers", "lp-send")
        _, second = await _hops(h, job)
        assert second.status == "VALIDATING"
        await h.request_termination(job)
        _first, second = await _hops(h, job)
        assert (second.status, (await _moves(h, second.id))[-1]) == (
            "DONE",
            ("api", "MOVED", "VALIDATING", "DONE"),
        )
        await h.run_until_settled()
        assert len(await _hops(h, job)) == 2
        assert (await h.get(job)).status == "CANCELLED"


async def _blocked_or_done(task: asyncio.Task[Any]) -> str | None:
    """Wait until ``task`` has finished (None) or waits for a row lock (the waiting query)."""
    conn = await asyncpg.connect(asyncpg_dsn(pg_url()))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120  # generous: the machine may be loaded
    try:
        while loop.time() < deadline:
            if task.done():
                return None
            waiting = await conn.fetchval(
                "SELECT query FROM pg_stat_activity WHERE wait_event_type = 'Lock' LIMIT 1"
            )
            if waiting is not None:
                return str(waiting)
            await asyncio.sleep(0.01)
        raise AssertionError("the cancel neither finished nor waited for a lock")
    finally:
        await conn.close()


async def test_on_postgresql_a_cancel_during_the_hand_offs_commit_leaves_no_live_hop() -> None:
    """The cancel starts while lp-send's apply has moved the hop and inserted the next one,
    before it commits: whichever way the locks fall, no hop of the cancelled job stays live."""
    if pg_skipped():
        pytest.fail("this test needs PostgreSQL (DROVER_TEST_SKIP_PG=1 deselects it)")
    async with pg_schema("lpipes") as schema:
        plugin = LanguagePipesPlugin()
        async with CoordinatorHarness(
            plugins=[plugin],
            include_builtin_handlers=False,
            database_url=pg_url(),
            database_schema=schema,
        ) as h:
            job = await submit(h.repository, JobRequest("race me", max_tokens=5))
            await _tick(h, "lp-validate", "lp-embed", "lp-process-layers")
            cancel: list[asyncio.Task[Any]] = []

            waited: list[str | None] = []

            async def cancel_meanwhile() -> None:
                cancel.append(asyncio.create_task(h.request_termination(job)))
                waited.append(await _blocked_or_done(cancel[0]))

            def hold_before_commit(step: str) -> None:
                if step == "before-history" and not cancel:
                    await_only(cancel_meanwhile())

            h.coordinator.inject_apply_failure = hold_before_commit
            await h.tick("lp-send")
            outcome = await cancel[0]
            assert outcome.to_status == "CANCELLED"
            h.coordinator.inject_apply_failure = None
            # The cancel waited for the hand-off's commit at its first statement, the lock
            # of the job's row (which the new hop's foreign key holds), so its next
            # statements saw the new hop and ended it too.
            (query,) = waited
            assert query is not None
            assert "FOR UPDATE" in query
            assert "WITH" not in query  # not yet the statement that ends the children
            first, second = hops = await _hops(h, job)
            assert (first.status_info, second.status) == ("HANDED_OFF", "DONE")
            assert (await _moves(h, second.id))[-1] == ("api", "MOVED", "VALIDATING", "DONE")
            await h.run_until_settled()
            assert [hop.status for hop in await _hops(h, job)] == ["DONE"] * len(hops)
            assert (await h.get(job)).status == "CANCELLED"


async def test_one_tick_runs_a_state_for_every_job_in_it(lp: Harness) -> None:
    async with lp() as h:
        prompts = [f"request {n}" for n in range(20)]
        jobs = [await submit(h.repository, JobRequest(p, max_tokens=3)) for p in prompts]
        report = await h.tick("lp-validate")
        assert (report.fetched, len(report.changes)) == (20, 20)
        await h.run_until_settled()
        for job, prompt in zip(jobs, prompts, strict=True):
            e = await h.get(job)
            assert (e.status, e.data["tokens"]) == ("COMPLETED", reference(prompt, LAYERS, 3))


async def test_transactions_per_token_fall_with_the_number_of_jobs(lp: Harness) -> None:
    """Counted, not timed: one job pays a whole round of the pipe per token; fifty jobs
    share it. The README quotes the figures of bench/transactions_per_token.py."""
    async with lp() as h:
        alone = await measure(h, jobs=1, max_tokens=8)
    async with lp() as h:
        batch = await measure(h, jobs=50, max_tokens=8)
    assert (alone.tokens, batch.tokens) == (8, 400)
    assert alone.per_token > 10  # ~10 moves a token, each a fetch and an apply
    assert batch.per_token < 1.0
    assert batch.per_token < alone.per_token / 20


async def test_drive_wakes_handlers_as_the_daemon_does(lp: Harness) -> None:
    async with lp() as h:
        job = await submit(h.repository, JobRequest("woken", max_tokens=2))
        ticks = await drive(h.coordinator, list(h.handlers))
        assert ticks > 0
        assert (await h.get(job)).status == "COMPLETED"


def test_plugins_check_strict_passes_and_graph_shows_the_fsm() -> None:
    """The installed pack: `drover plugins` lists it, `plugins check --strict` finds nothing,
    `drover graph --kind` draws the seed's FSM."""
    from drover.cli.group import main

    runner = CliRunner(env={"DROVER_LOAD_PLUGINS": "lpipes"})
    listed = runner.invoke(main, ["plugins"])
    assert listed.exit_code == 0, listed.output
    assert "lpipes" in listed.output
    assert "lp-process-layers (PROCESS_LAYERS)" in listed.output
    checked = runner.invoke(main, ["plugins", "check", "--strict"])
    assert checked.exit_code == 0, checked.output
    assert "0 warning(s)" in checked.output
    graph = runner.invoke(main, ["graph", "--kind", HOP_KIND])
    assert graph.exit_code == 0, graph.output
    for edge in (
        "VALIDATING  -> HEAD         [lp-validate: head]",
        "HEAD        -> SEND         [lp-head: remote]",
        "SEND        -> DONE         [lp-send: handed-off]",
        "PROCESS_LAYERS -> DONE         [lp-stale: stale]",
    ):
        assert edge in graph.output
    jobs = runner.invoke(main, ["graph", "--kind", JOB_KIND])
    assert jobs.exit_code == 0, jobs.output
    assert "RUNNING     -> COMPLETED    [lp-finish: completed]" in jobs.output


def test_the_entry_point_names_the_plugin() -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    assert project["entry-points"]["drover"] == {"lpipes": "drover_lpipes:plugin"}
    module = importlib.import_module("drover_lpipes")
    assert isinstance(module.plugin, LanguagePipesPlugin)
    dist = metadata.distribution(project["name"])  # `make venv` installs it
    (ep,) = [ep for ep in dist.entry_points if ep.group == "drover"]
    assert ep.load() is module.plugin


def test_a_bad_request_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"^max_tokens must be >= 1, not 0$"):
        JobRequest("hi", max_tokens=0)
    with pytest.raises(ValueError, match=r"^prompt must have at least one word$"):
        JobRequest("  ")


async def test_the_demo_ends_as_the_readme_says(tmp_path: Path) -> None:
    """`drover-lpipes-demo` submits; the pack's handlers (as `drover run` loads them) carry
    it out: three jobs complete, `headless` fails, `long` runs until cancelled."""
    from drover_lpipes.demo import _submit_requests

    url = f"sqlite+aiosqlite:///{tmp_path}/lpipes.db"
    submitted = {label.split(":")[0]: job for label, job in await _submit_requests(url)}
    async with CoordinatorHarness(
        plugins=[LanguagePipesPlugin()], include_builtin_handlers=False, database_url=url
    ) as h:
        for _ in range(60):
            await _tick(h, *h.handlers)
        ends = {name: (await h.get(job)) for name, job in submitted.items()}
        assert {name: str(e.status) for name, e in ends.items()} == {
            "short": "COMPLETED",
            "chunked": "COMPLETED",
            "eos": "COMPLETED",
            "headless": "FAILED",
            "long": "RUNNING",
        }
        assert len(ends["short"].children) == 25  # a → b → c → a per token, 8 tokens
        assert ends["eos"].data["tokens"][-1] == EOS
        assert len(ends["eos"].data["tokens"]) == 6
        assert ends["headless"].status_info == Reason.NO_END_MODEL
        await h.request_termination(submitted["long"])
        assert (await h.get(submitted["long"])).status == "CANCELLED"


async def test_under_the_daemon_every_move_is_woken_none_waits_for_an_interval(
    drover_database: TestDatabase,
) -> None:
    """drover's daemon with every interval an hour: the job still completes, because each
    step is woken. Node ``a`` holds two segments, so ``lp-process-layers``' ``local``
    (PROCESS_LAYERS kept) ticks it again; the last hop's end wakes ``lp-finish`` (it reads
    the job's children); ``lp-stale`` (a 60 s ``StatusAge``) is never woken by a move."""
    pipe = Pipe([Node("a", [(0, 5), (5, 10)], end_model=True), Node("b", [(10, 30)])], LAYERS)
    ticks: dict[str, int] = {}
    async with CoordinatorHarness(
        plugins=[LanguagePipesPlugin(pipe)],
        include_builtin_handlers=False,
        database_url=drover_database.url,
        database_schema=drover_database.schema,
    ) as h:
        job = await submit(h.repository, JobRequest("woken by the daemon", max_tokens=3))
        daemon = Daemon(
            h.coordinator,
            h.repository,
            default_interval=3600.0,
            safety_interval=3600.0,
            on_tick=lambda r: ticks.__setitem__(r.handler, ticks.get(r.handler, 0) + 1),
        )
        run = asyncio.create_task(daemon.run())
        try:
            for _ in range(400):
                if (await h.get(job)).status != JobState.RUNNING:
                    break
                await asyncio.sleep(0.05)
        finally:
            daemon.stop()
            await asyncio.wait_for(run, timeout=20)
        ended = await h.get(job)
        assert (ended.status, ended.data["tokens"]) == (
            JobState.COMPLETED,
            reference("woken by the daemon", LAYERS, 3),
        )
        assert ticks["lp-stale"] == 1  # its start-up tick
        layer_rows = [
            r for hop in ended.children for r in await h.history(hop.id)
            if r.handler == "lp-process-layers" and str(r.result) == "local"
        ]  # fmt: skip
        assert layer_rows  # a's second segment ran on a re-woken tick
