"""experimaestro's job lifecycle as one drover kind, ``xpm-job``.

``JobState`` is experimaestro's ``JobState`` in its own order (UNSCHEDULED →
WAITING → READY → SCHEDULED → RUNNING → DONE/ERROR); ``FailureReason`` is its
``JobFailureStatus`` (plus CANCELLED), kept in the entity's ``status_info``.

Each counter token is a *claimed* pool of the kind: a job holds, while
SCHEDULED or RUNNING, the tokens its ``spec["pools"]`` claims
(``{"xpm-token": 2}``: experimaestro's ``count`` tokens of a counter, of as
many counters as it names); a job that claims none holds none.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from drover import Budget, EntityKind, Pool, TerminationRule, Transition


class JobState(StrEnum):
    """experimaestro's job states; declaration order is lifecycle order."""

    UNSCHEDULED = "UNSCHEDULED"
    WAITING = "WAITING"
    READY = "READY"
    SCHEDULED = "SCHEDULED"
    RUNNING = "RUNNING"
    DONE = "DONE"
    ERROR = "ERROR"


class FailureReason(StrEnum):
    """Why a job is in ERROR (its ``status_info``)."""

    DEPENDENCY = "DEPENDENCY"
    FAILED = "FAILED"
    MEMORY = "MEMORY"
    TIMEOUT = "TIMEOUT"
    CANCELLED = "CANCELLED"


#: ``drover why`` prints these words beside a job's status_info.
FAILURE_MEANINGS = {
    FailureReason.DEPENDENCY: "a job it depends on ended without success",
    FailureReason.FAILED: "its process exited with an error",
    FailureReason.MEMORY: "its process ran out of memory",
    FailureReason.TIMEOUT: "its process exceeded its walltime (and no retry is left)",
    FailureReason.CANCELLED: "it was cancelled (drover terminate)",
}

JOB_KIND = "xpm-job"
#: The relation a job's static dependencies are linked with.
DEPENDS_ON = "depends_on"
#: The budget a resumable job's timeouts are charged to; its limit is ``max_retries``.
RETRIES = "retries"
#: experimaestro's default ``max_retries``.
DEFAULT_MAX_RETRIES = 3
#: Where the charge past ``max_retries`` ends a job, and why (the transition says it).
_OUT_OF_RETRIES = Transition(JobState.ERROR, status_info=FailureReason.TIMEOUT)
#: The default counter token's pool name; ``[pools] xpm-token = K`` sets its capacity.
TOKEN_POOL_NAME = "xpm-token"
#: Its capacity when neither the plugin nor the configuration says otherwise.
DEFAULT_TOKENS = 2
#: The statuses a job holds its tokens in.
HOLDS_TOKENS = frozenset({JobState.SCHEDULED, JobState.RUNNING})


def token_pool(name: str = TOKEN_POOL_NAME, tokens: int = DEFAULT_TOKENS) -> Pool:
    """A counter of ``tokens`` tokens; a job holds the ones it claims while SCHEDULED or
    RUNNING."""
    return Pool(name, tokens, held_in=HOLDS_TOKENS, claimed=True)


def make_kind(counters: Mapping[str, int] | None = None) -> EntityKind:
    """``xpm-job``, with one claimed pool per counter (name → tokens; default
    ``{"xpm-token": 2}``)."""
    counters = {TOKEN_POOL_NAME: DEFAULT_TOKENS} if counters is None else counters
    return EntityKind(
        JOB_KIND,
        JobState,
        terminal={JobState.DONE, JobState.ERROR},
        success={JobState.DONE},
        created_in={JobState.UNSCHEDULED},
        # No children: the job's own status is its result.
        result_from="status",
        # A resumable job's timeouts; the charge past max_retries ends it in ERROR, TIMEOUT.
        budgets=(Budget(RETRIES, DEFAULT_MAX_RETRIES, give_up=_OUT_OF_RETRIES),),
        termination=(TerminationRule(JobState.ERROR, status_info=FailureReason.CANCELLED),),
        pools=tuple(token_pool(name, tokens) for name, tokens in sorted(counters.items())),
    )


KIND = make_kind()
