"""experimaestro's job lifecycle as two drover kinds.

``JobState`` is experimaestro's ``JobState`` in its own order (UNSCHEDULED →
WAITING → READY → SCHEDULED → RUNNING → DONE/ERROR); ``FailureReason`` is its
``JobFailureStatus`` (plus CANCELLED), kept in the entity's ``status_info``.

Two kinds share every handler: ``xpm-job`` and ``xpm-token-job``. The second
holds a token of the counter pool ``xpm-token`` while SCHEDULED or RUNNING, so
at most the pool's capacity of them run at once. They are two kinds because a
drover pool is held by every entity of a kind in the holding statuses; a job
that needs no token must therefore be of another kind (README: workarounds).
"""

from __future__ import annotations

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
TOKEN_JOB_KIND = "xpm-token-job"
#: The relation a job's static dependencies are linked with.
DEPENDS_ON = "depends_on"
#: The budget a resumable job's timeouts are charged to; its limit is ``max_retries``.
RETRIES = "retries"
#: experimaestro's default ``max_retries``.
DEFAULT_MAX_RETRIES = 3
#: The counter token's pool name; ``[pools] xpm-token = K`` sets its capacity.
TOKEN_POOL_NAME = "xpm-token"
#: Its capacity when neither the plugin nor the configuration says otherwise.
DEFAULT_TOKENS = 2


def token_pool(tokens: int = DEFAULT_TOKENS) -> Pool:
    """The counter token: ``tokens`` jobs hold it at most, while SCHEDULED or RUNNING."""
    return Pool(TOKEN_POOL_NAME, tokens, held_in={JobState.SCHEDULED, JobState.RUNNING})


def _kind(name: str, pools: tuple[Pool, ...]) -> EntityKind:
    return EntityKind(
        name,
        JobState,
        terminal={JobState.DONE, JobState.ERROR},
        success={JobState.DONE},
        created_in={JobState.UNSCHEDULED},
        # No children: the job's own status is its result.
        result_from="status",
        # A resumable job's timeouts; the charge past max_retries ends it in ERROR.
        budgets=(Budget(RETRIES, DEFAULT_MAX_RETRIES, give_up=Transition(JobState.ERROR)),),
        termination=(TerminationRule(JobState.ERROR, status_info=FailureReason.CANCELLED),),
        pools=pools,
    )


def make_kinds(tokens: int = DEFAULT_TOKENS) -> tuple[EntityKind, EntityKind]:
    """``xpm-job`` and ``xpm-token-job``, the latter holding a pool of ``tokens``."""
    return _kind(JOB_KIND, ()), _kind(TOKEN_JOB_KIND, (token_pool(tokens),))


KINDS = make_kinds()
