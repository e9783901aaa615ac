"""The gaps plugin authors hit porting real lifecycles (issue 34), each on both databases.

Each test fails on the engine before its fix; the kinds are the tests' own
(:mod:`peers`), so nothing here leans on a built-in lifecycle.
"""

from __future__ import annotations

from typing import Any

import attrs
import tree
from peers import Scripted, harness, skip

from drover import HandlerOptions, StatusAge, TerminationRule


async def _picked(h: Any, name: str) -> list[str]:
    return [c.entity_id for c in (await h.tick(name)).changes]


def _picker(name: str, *filters: Any) -> Scripted:
    cls = type(
        name.title().replace("-", ""),
        (Scripted,),
        {"handler": name, "filters": filters, "options": HandlerOptions(batch_size=5)},
    )
    return cls(skip)  # type: ignore[no-any-return]


# -- gap 1: StatusAge is inclusive -------------------------------------------------------------


async def test_status_age_matches_an_entity_exactly_that_old(make_harness):
    """dstack resubmits once the back-off has passed: at n seconds, not one tick later."""
    seconds = _picker("aged", StatusAge(seconds=10))
    from_spec = _picker("backed-off", StatusAge(spec_key="retry_after"))
    async with harness(make_harness, seconds, from_spec) as h:
        job = await h.create("job", spec={"retry_after": 10})
        h.clock.advance(9.5)
        assert await _picked(h, "aged") == []
        assert await _picked(h, "backed-off") == []
        h.clock.advance(0.5)
        assert await _picked(h, "aged") == [job]
        assert await _picked(h, "backed-off") == [job]


# -- gap 2: a termination rule gives the children it ends a reason -----------------------------


async def test_a_termination_rule_sets_the_status_info_of_the_children_it_ends(make_harness):
    rule = TerminationRule(tree.Job.CANCELLED, children_info="JOB_CANCELLED")
    cancelling = attrs.evolve(tree.JOB, termination=(rule,))
    async with tree.harness(make_harness, kinds=(cancelling, tree.TASK, tree.ATTEMPT)) as h:
        job, tasks, attempts = await tree.tree(h)
        await h.repository.request_termination([job])
        assert (await h.get(job)).status_info == "USER_REQUESTED"
        for child in [*tasks, *attempts]:
            ended = await h.get(child)
            assert ended.status in {tree.Task.CANCELLED, tree.Attempt.FAILED}, ended.status
            assert ended.status_info == "JOB_CANCELLED"
