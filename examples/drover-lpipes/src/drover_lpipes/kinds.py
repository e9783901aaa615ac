"""Language Pipes' jobs and their hops as two drover kinds.

``lp-job`` is a client's generation request, held by its origin node: RUNNING
until the pipe completes it (COMPLETED), it fails (FAILED, ``status_info``
says why) or the client cancels it (CANCELLED).

``lp-hop`` (parent ``lp-job``) is one ``JobProcessor`` run on one node: the
seed's FSM, VALIDATING → EMBED / PROCESS_LAYERS / HEAD → SEND → DONE. A hop
that hands the job off ends DONE and creates the next hop, on the next node,
in the same transaction. Exactly one hop of a running job is live at a time.
"""

from __future__ import annotations

from enum import StrEnum

from drover import EntityKind, TerminationRule


class JobState(StrEnum):
    """A generation request, as its origin node sees it; declaration order is lifecycle order."""

    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class HopState(StrEnum):
    """The seed's ``JobProcessor`` states."""

    VALIDATING = "VALIDATING"
    EMBED = "EMBED"
    PROCESS_LAYERS = "PROCESS_LAYERS"
    HEAD = "HEAD"
    SEND = "SEND"
    DONE = "DONE"


class Reason(StrEnum):
    """Why a hop (and then its job) ended: its ``status_info``."""

    HANDED_OFF = "HANDED_OFF"
    COMPLETED = "COMPLETED"
    JOB_MISSING = "JOB_MISSING"
    PIPE_INCOMPLETE = "PIPE_INCOMPLETE"
    ORIGIN_MISMATCH = "ORIGIN_MISMATCH"
    NO_END_MODEL = "NO_END_MODEL"
    NO_MODEL = "NO_MODEL"
    CLIENT_GONE = "CLIENT_GONE"
    STALE = "STALE"
    CANCELLED = "CANCELLED"


#: ``drover why`` prints these words beside a hop's or a job's status_info.
REASON_MEANINGS = {
    Reason.HANDED_OFF: "its node handed the job to the next node (the next hop)",
    Reason.COMPLETED: "the head generated EOS or the job's last token",
    Reason.JOB_MISSING: "the hand-off carried no job context",
    Reason.PIPE_INCOMPLETE: "some layer of the model had no node up to run it",
    Reason.ORIGIN_MISMATCH: "a HEAD step reached a node other than the job's origin",
    Reason.NO_END_MODEL: "the origin node has no end model (embedding, norm, head) loaded",
    Reason.NO_MODEL: "no model segment for the job's next layer",
    Reason.CLIENT_GONE: "the client that asked for the tokens went away",
    Reason.STALE: f"no progress for {60} seconds (a node stopped answering)",
    Reason.CANCELLED: "the client cancelled the job (drover terminate)",
}

JOB_KIND = "lp-job"
HOP_KIND = "lp-hop"
#: Seconds a hop may hold one status before its job is stale (Language Pipes' 60 s).
STALE_AFTER = 60.0

JOB = EntityKind(
    JOB_KIND,
    JobState,
    terminal={JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED},
    success={JobState.COMPLETED},
    created_in={JobState.RUNNING},
    # Hops end DONE whether they handed off or failed: the job's own status decides.
    result_from="status",
    # The live hop ends with the job (DONE, the hop kind's one terminal status).
    termination=(TerminationRule(JobState.CANCELLED, status_info=Reason.CANCELLED),),
)
HOP = EntityKind(
    HOP_KIND,
    HopState,
    terminal={HopState.DONE},
    success={HopState.DONE},
    parent=JOB_KIND,
    created_in={HopState.VALIDATING},
    result_from="status",
    # A hop ends with its job: cancel the job, not one of its hops.
    terminable=False,
)
KINDS = (JOB, HOP)
