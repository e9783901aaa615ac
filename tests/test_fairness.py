"""HandlerOptions(order="oldest-seen"): a polling handler reaches every entity in turn."""

from __future__ import annotations

from typing import Any

import pytest
from peers import Job, Scripted, harness, skip

from drover import HandlerOptions, InvalidHandlerError
from drover.model.options import validate_options


class Poll(Scripted):
    handler = "poll"
    statuses = frozenset({Job.RUNNING})
    options = HandlerOptions(max_retries=None, batch_size=3, order="oldest-seen")


class PollByPriority(Poll):
    handler = "poll-by-priority"
    options = HandlerOptions(max_retries=None, batch_size=3)


def _ids(h: Any, report: Any) -> list[str]:
    return [c.entity_id for c in report.changes]


async def test_oldest_seen_reaches_every_entity_in_turn(make_harness):
    poll, plain = Poll(skip), PollByPriority(skip)
    async with harness(make_harness, poll, plain) as h:
        # Priority order would be: the high-priority ones first, every tick.
        jobs = [await h.create("job", status=Job.RUNNING, priority=7 - n) for n in range(7)]
        batches = []
        for _ in range(3):
            batches.append(_ids(h, await h.tick("poll")))
            h.clock.advance(1)
        assert batches[0] == jobs[:3]
        assert batches[1] == jobs[3:6]
        # The last one never fetched, then the two seen longest ago.
        assert batches[2] == [jobs[6], jobs[0], jobs[1]]
        seen = {i for batch in batches for i in batch}
        assert seen == set(jobs)
        # The marks are the handler's own: another handler still fetches by priority.
        for _ in range(2):
            assert _ids(h, await h.tick("poll-by-priority")) == jobs[:3]
        # A new entity is fetched before every one already seen.
        newcomer = await h.create("job", status=Job.RUNNING, priority=-5)
        assert _ids(h, await h.tick("poll"))[0] == newcomer


async def test_oldest_seen_keeps_the_filters_before_the_limit(make_harness):
    from drover import Field

    class PollEnabled(Poll):
        handler = "poll-enabled"
        filters = (Field("spec", ("enabled",), "eq", True),)

    poll = PollEnabled(skip)
    async with harness(make_harness, poll) as h:
        for _ in range(4):
            await h.create("job", status=Job.RUNNING, spec={"enabled": False})
        on = [await h.create("job", status=Job.RUNNING, spec={"enabled": True}) for _ in range(4)]
        first = _ids(h, await h.tick("poll-enabled"))
        h.clock.advance(1)
        second = _ids(h, await h.tick("poll-enabled"))
        assert first == on[:3]
        assert second == [on[3], on[0], on[1]]


def test_an_unknown_order_is_refused():
    with pytest.raises(InvalidHandlerError, match="order must be one of"):
        validate_options(HandlerOptions(order="newest"), where="options of handler 'x'")


async def test_order_comes_from_configuration(make_harness):
    plain = PollByPriority(skip)
    async with harness(
        make_harness, plain, handler_options={"poll-by-priority": {"order": "oldest-seen"}}
    ) as h:
        jobs = [await h.create("job", status=Job.RUNNING) for _ in range(4)]
        assert _ids(h, await h.tick("poll-by-priority")) == jobs[:3]
        h.clock.advance(1)
        assert _ids(h, await h.tick("poll-by-priority")) == [jobs[3], jobs[0], jobs[1]]


def test_order_in_the_configuration_file(tmp_path):
    from drover.app import handler_overrides
    from drover.config import load_config

    path = tmp_path / "drover.toml"
    path.write_text('[handlers.poll]\norder = "oldest-seen"\nbatch_size = 50\n')
    loaded = load_config(path, environ={})
    config = getattr(loaded, "config", loaded)
    assert handler_overrides(config)["poll"] == {"order": "oldest-seen", "batch_size": 50}


async def test_oldest_seen_with_claims_takes_disjoint_batches(make_harness):
    """Two coordinators (claims, as on PostgreSQL) polling oldest-seen never share a batch and
    between them reach every entity. On SQLite the claim is ignored (one coordinator)."""
    from drover.coordinator.tick import Coordinator

    poll = Poll(skip)
    async with harness(make_harness, poll) as h:
        jobs = [await h.create("job", status=Job.RUNNING) for _ in range(6)]
        a, b = (
            Coordinator(h.repository, {"poll": poll}, clock=h.clock, kinds=h.app.kinds,
                        claim_owner=owner)
            for owner in ("a", "b")
        )  # fmt: skip
        first = _ids(h, await a.tick("poll"))
        second = _ids(h, await b.tick("poll"))
        assert first == jobs[:3]
        assert second == jobs[3:]


async def test_the_marks_of_entities_that_left_are_forgotten(make_harness):
    """The marks stay about as many as the candidates: those of entities that left go."""
    import sqlalchemy as sa

    from drover.model.plan import Change
    from drover.model.status import SchedulingResult
    from drover.storage.schema import fetch_marks

    async def marked() -> set[str]:
        async with h.app.engine.connect() as conn:
            rows = await conn.execute(sa.select(fetch_marks.c.entity_id))
            return {r[0] for r in rows}

    poll = Poll(skip)
    async with harness(make_harness, poll) as h:
        jobs = [await h.create("job", status=Job.RUNNING) for _ in range(4)]
        await h.tick("poll")
        assert await marked() == set(jobs[:3])
        done = Change(
            entity_id=jobs[0],
            from_status=Job.RUNNING,
            result=SchedulingResult.SUCCESS,
            to_status=Job.DONE,
            kind="job",
        )
        await h.repository.apply("test", [done], now=h.clock.time())
        h.clock.advance(1)
        assert _ids(h, await h.tick("poll")) == [jobs[3], jobs[1], jobs[2]]
        assert await marked() == set(jobs[1:])
