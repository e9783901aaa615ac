"""``HandlerResult.per_target()``: a result read as one outcome per target. No database."""

from __future__ import annotations

from typing import Any

from drover import HandlerResult, NewEntity
from drover.model.outcomes import UNMENTIONED, Reported, TargetOutcome


def test_a_typical_result_reads_as_one_outcome_per_id():
    """Every collection lands on its id's outcome; ids come in the result's order."""
    job = NewEntity("job", by="a", id="j1")
    result = HandlerResult(
        successes=["a"],
        failures=["b"],
        skipped=["c"],
        outcomes={"d": "stale"},
        messages={"b": "agent unreachable", "e": "still waiting"},
        error_codes={"b": "backend-error"},
        status_infos={"a": "FAST"},
        budgets={"b": "preemption"},
        data={"a": {"seen": 1}},
        terminate={"d": ["r1", "r2"]},
        results={"d": "FAILURE"},
        claims={"a": {"worker-a": 1}},
        create=[job],
        placements={"k1": "agent-1"},
    )
    view = result.per_target()
    assert list(view.by_id) == ["a", "b", "c", "d", "e"]
    assert view.get("a") == TargetOutcome(
        reported=Reported.SUCCESS,
        status_info="FAST",
        data={"seen": 1},
        claims={"worker-a": 1},
        creates=(job,),
    )
    assert view.get("b") == TargetOutcome(
        reported=Reported.FAILURE,
        message="agent unreachable",
        error_code="backend-error",
        budget="preemption",
    )
    assert view.get("c") == TargetOutcome(reported=Reported.SKIPPED)
    assert view.get("d") == TargetOutcome(
        reported=Reported.NAMED, name="stale", terminates=("r1", "r2"), result="FAILURE"
    )
    # A message for an id without an outcome is kept: it is used if the target expires.
    assert view.get("e") == TargetOutcome(reported=Reported.NOTHING, message="still waiting")
    assert view.get("f") is UNMENTIONED
    assert view.placements == {"k1": "agent-1"}
    assert (view.repeated, view.uncredited) == ((), ())
    assert view.problem({"a", "b", "c", "d", "e"}) is None
    # Only the ids whose outcomes carry more than a class and a message are checked.
    assert set(view.carrying) == {"a", "b", "d"}


def test_plain_outcomes_are_shared_not_allocated_per_target():
    """A thousand plain successes (or equal failures) are one value each."""
    ids = [f"s{i}" for i in range(1000)]
    view = HandlerResult(successes=ids).per_target()
    assert len({id(o) for o in view.by_id.values()}) == 1
    failed = HandlerResult(
        failures=ids, messages=dict.fromkeys(ids, "down"), error_codes=dict.fromkeys(ids, "e")
    ).per_target()
    assert len({id(o) for o in failed.by_id.values()}) == 1
    assert failed.get("s7").message == "down"


def test_the_view_reads_what_a_handler_added_after_constructing_the_result():
    """Handlers fill their result's lists and maps as they go: the view is read as it stands."""
    result = HandlerResult()
    result.failures.append("a")
    result.messages["a"] = "boom"
    assert result.per_target().get("a") == TargetOutcome(reported=Reported.FAILURE, message="boom")


def test_an_id_listed_twice_is_a_problem_naming_it():
    """In two lists, or twice in one: the problem names every such target, sorted."""
    for result in (
        HandlerResult(successes=["b", "a"], failures=["a"], outcomes={"b": "stale"}),
        HandlerResult(skipped=["a", "a", "b", "b"]),
    ):
        view = result.per_target()
        assert view.repeated == ("a", "b")
        assert view.problem({"a", "b"}) == "it lists session(s) ['a', 'b'] more than once"


def test_ids_that_are_not_targets_are_ignored_not_refused():
    """An outcome for an id outside the tick is ignored, even listed twice."""
    view = HandlerResult(successes=["a", "x", "x"], failures=["y"]).per_target()
    assert view.ignored({"a"}) == ("x", "y")
    assert view.problem({"a"}) is None


def test_what_is_said_of_an_id_without_an_outcome_is_a_problem():
    """Data, terminations, results, claims and creations need a target with an outcome."""
    cases = {
        "data patch for a, which is not a target with an outcome": HandlerResult(data={"a": {}}),
        "terminations asked for a, which is not a target with an outcome": HandlerResult(
            terminate={"a": []}
        ),
        "result set for a, which is not a target with an outcome": HandlerResult(
            successes=["x"], results={"x": "SUCCESS", "a": "SUCCESS"}
        ),
        "claims for a, which is not a target with an outcome": HandlerResult(
            skipped=["b"], claims={"a": {"pool": 1}}
        ),
        "entity j1 of kind 'job' is created by 'a', which is not a target with an outcome "
        "(set by= or parent_id=)": HandlerResult(create=[NewEntity("job", by="a", id="j1")]),
        "entity j2 of kind 'job' is created by None, which is not a target with an outcome "
        "(set by= or parent_id=)": HandlerResult(
            successes=["a"], create=[NewEntity("job", id="j2")]
        ),
        "budget 'b1' is charged for a, which is neither among the failures nor given a "
        "named outcome": HandlerResult(successes=["a"], budgets={"a": "b1"}),
    }
    for text, result in cases.items():
        assert result.per_target().problem({"a", "b", "x"}) == text
    # A target that is not among the tick's targets has no outcome either.
    listed = HandlerResult(successes=["a"], data={"a": {"k": 1}}).per_target()
    assert listed.problem({"b"}) == "data patch for a, which is not a target with an outcome"
    assert listed.problem({"a"}) is None


def test_values_a_target_carries_are_checked():
    """A data patch must be a JSON mapping, a result SUCCESS or FAILURE, a claim >= 1."""
    assert (
        HandlerResult(successes=["a"], data={"a": [1]}).per_target().problem({"a"})
        == "data patch for a is not a mapping"
    )
    null: dict[str, Any] = {"a": None}
    assert (
        HandlerResult(successes=["a"], data=null).per_target().problem({"a"})
        == "data patch for a is not a mapping"
    )
    assert (
        HandlerResult(successes=["a"], results={"a": "MAYBE"}).per_target().problem({"a"})
        == "result 'MAYBE' (for a) is not one of ['FAILURE', 'SUCCESS']"
    )
    assert (
        HandlerResult(successes=["a"], claims={"a": {"p": 0}}).per_target().problem({"a"})
        == "claim on pool 'p' (for a) is 0, not an integer >= 1"
    )
