"""The gaps plugin authors hit porting real lifecycles (issue 34), each on both databases.

Each test fails on the engine before its fix; the kinds are the tests' own
(:mod:`peers`), so nothing here leans on a built-in lifecycle.
"""

from __future__ import annotations

from typing import Any

from peers import Scripted, harness, skip

from drover import HandlerOptions, StatusAge


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
