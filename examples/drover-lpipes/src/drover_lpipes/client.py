"""The client side: a generation request submitted at its origin node, and a client that left.

:func:`submit` creates the job with its first hop (VALIDATING on the origin)
in one transaction. :func:`client_gone` is what the origin's web server does
when the client's connection drops: a pushed report (``Repository.report``)
that fails the job, which ends its live hop with it; a hand-off racing it
loses its compare-and-set, so no hop is created after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from .kinds import JOB_KIND, HopState, JobState, Reason
from .pipe import Pipe

if TYPE_CHECKING:
    # Storage is imported when a job is submitted, not when drover loads the plugin.
    from drover import Repository

#: The source of the client's reports in history.
CLIENT_SOURCE = "lp-client"


@attrs.frozen
class JobRequest:
    """One chat completion as a client asks it of its origin node.

    ``chunk`` (prompt tokens per prefill pass, 0: the whole prompt at once),
    ``stop_after`` (where the fake model emits EOS; None: never) and
    ``fuse_embed`` (the head embeds the next token in its own step) go in the
    job's context.
    """

    prompt: str
    max_tokens: int = 16
    origin: str = "a"
    chunk: int = 0
    stop_after: int | None = None
    fuse_embed: bool = True

    def __attrs_post_init__(self) -> None:
        if not self.prompt.split():
            raise ValueError("prompt must have at least one word")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, not {self.max_tokens}")
        if self.chunk < 0:
            raise ValueError(f"chunk must be >= 0, not {self.chunk}")

    def context(self) -> dict[str, Any]:
        """The job's context as its first hop receives it.

        No key holds ``null``: a data patch's ``null`` removes its key (RFC 7396),
        so the context saved with a move would differ from the one handed on.
        """
        context = {
            "origin": self.origin,
            "step": "HEAD",
            "layer": 0,
            "prompt": self.prompt,
            "prefilled": 0,
            "chunk": self.chunk,
            "kv": 0,
            "tokens": [],
            "max_tokens": self.max_tokens,
            "stop_after": self.stop_after,
            "fuse_embed": self.fuse_embed,
        }
        return {key: value for key, value in context.items() if value is not None}


async def submit(repository: Repository, request: JobRequest) -> str:
    """Create the job and its first hop (on the origin) in one transaction; return its id."""
    return await repository.create_entity(
        JOB_KIND,
        spec={"prompt": request.prompt, "max_tokens": request.max_tokens, "origin": request.origin},
        status=JobState.RUNNING,
        children=[
            {
                "status": HopState.VALIDATING,
                "spec": {"node": request.origin, "seq": 0, "context": request.context()},
            }
        ],
    )


async def client_gone(repository: Repository, pipe: Pipe, job_id: str) -> bool:
    """The client's connection dropped: no more updates reach it, and the job fails
    (CLIENT_GONE) if it is still running. Returns whether the report applied."""
    pipe.gone.add(job_id)
    return await repository.report(
        job_id,
        JobState.FAILED,
        expected=[JobState.RUNNING],
        status_info=Reason.CLIENT_GONE,
        message="the client closed its connection",
        source=CLIENT_SOURCE,
    )
