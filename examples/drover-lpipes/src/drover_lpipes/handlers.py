"""One handler per state of the seed's ``JobProcessor`` FSM, and two for the job.

Each hop handler fetches the hops in its state on the nodes that are up (a
``Field`` filter in the fetch's SQL, its values recomputed each tick), runs
its step for the whole batch, and reports for each hop the seed's successor
as a named outcome, with the job's context saved in the hop's ``data`` by the
same transaction. ``lp-send`` creates the next hop, on the next node, with
its outcome. ``lp-stale`` ends a hop that has held its state for 60 s
(``StatusAge``), and ``lp-finish`` ends a job once no hop of it is live
(``Children``). No handler moves a status itself, keeps a counter in
``data`` or filters its targets in Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs

from drover import (
    Children,
    DeclaredHandler,
    Entity,
    Field,
    HandlerOptions,
    HandlerResult,
    KernelMatchType,
    LifecycleHandler,
    NewEntity,
    StatusAge,
    StatusTransitions,
    Transition,
)

from .kinds import (
    HOP_KIND,
    JOB_KIND,
    REASON_MEANINGS,
    STALE_AFTER,
    HopState,
    JobState,
    Reason,
)
from .pipe import EOS, HandOff, Node, Pipe, detokenize, embed, head, tokenize

#: A hop's compute step: ``HEAD`` is the origin's (embedding, norm, head), ``LAYER`` any node's.
HEAD_STEP = "HEAD"
LAYER_STEP = "LAYER"

Context = dict[str, Any]


def context_of(hop: Entity) -> Context | None:
    """The job's context as this hop holds it: saved with its last move, else as it arrived."""
    saved = (hop.data or {}).get("context")
    arrived = hop.spec.get("context")
    found = saved if saved is not None else arrived
    return dict(found) if isinstance(found, dict) else None


@attrs.define
class _Outcomes:
    """A handler's outcomes for one batch, built hop by hop."""

    outcomes: dict[str, str] = attrs.field(factory=dict)
    data: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    infos: dict[str, str] = attrs.field(factory=dict)
    messages: dict[str, str] = attrs.field(factory=dict)
    results: dict[str, str] = attrs.field(factory=dict)
    create: list[NewEntity] = attrs.field(factory=list)

    def save(self, hop: Entity, ctx: Context) -> None:
        """Save ``ctx`` with ``hop``'s move: a merge-patch, so a ``to`` the job no longer
        has is patched to null (removed), not left from the last move."""
        self.data[hop.id] = {"context": {**ctx, "to": ctx.get("to")}}

    def move(self, hop: Entity, outcome: str, ctx: Context) -> None:
        """``hop`` takes ``outcome``, its context saved with the move."""
        self.outcomes[hop.id] = outcome
        self.save(hop, ctx)

    def end(self, hop: Entity, outcome: str, reason: Reason, ctx: Context | None) -> None:
        """``hop`` ends DONE by ``outcome`` (a failure unless it completed or handed off)."""
        self.outcomes[hop.id] = outcome
        self.infos[hop.id] = reason
        if ctx is not None:
            self.save(hop, ctx)
        if reason not in (Reason.COMPLETED, Reason.HANDED_OFF):
            self.results[hop.id] = "FAILURE"
            self.messages[hop.id] = REASON_MEANINGS[reason]

    def result(self) -> HandlerResult:
        """The batch's HandlerResult."""
        return HandlerResult(
            outcomes=self.outcomes,
            data=self.data,
            status_infos=self.infos,
            messages=self.messages,
            results=self.results,
            create=self.create,
        )


class _PipeHandler(DeclaredHandler):
    """What the hop handlers share: the pipe, one state, the up-nodes filter, their options;
    each declares its state's successors (the seed's) as ``transitions``."""

    kind: ClassVar[str] = HOP_KIND
    step: ClassVar[str] = "step"
    state: ClassVar[HopState]
    status_info_meanings = {str(k): v for k, v in REASON_MEANINGS.items()}

    def __init__(self, pipe: Pipe) -> None:
        self.pipe = pipe

    @classmethod
    def name(cls) -> str:
        """``lp-<step>``."""
        return f"lp-{cls.step}"

    @property
    def target_statuses(self) -> frozenset[str]:
        """The one state this handler runs."""
        return frozenset({self.state})

    @property
    def candidate_filters(self) -> tuple[Field, ...]:
        """Only hops on nodes that are up: a node that is down runs nothing (its hops go stale)."""
        up = tuple(self.pipe.up()) or ("",)  # "" names no node: nothing is fetched
        return (Field("spec", ("node",), "in", up),)

    @classmethod
    def default_options(cls) -> HandlerOptions:
        """No tries limit and no timeout (staleness is ``lp-stale``'s); a large batch: one
        tick runs the step for every job in this state, as a forward pass runs a batch."""
        return HandlerOptions(max_retries=None, timeout=None, batch_size=1000)

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Run the step for each hop; a hop whose payload lost its context ends at once."""
        out = _Outcomes()
        for hop in targets:
            ctx = context_of(hop)
            if ctx is None:
                out.end(hop, self.missing, Reason.JOB_MISSING, None)
                continue
            node = self.pipe.nodes[str(hop.spec["node"])]
            await self.run(hop, node, ctx, out)
        return out.result()

    #: The outcome (to DONE) a hop without a context takes. Only a hand-off's payload can
    #: lack it (VALIDATING's ``invalid``); the other states' are for hops seeded so.
    missing: ClassVar[str] = "invalid"

    async def run(self, hop: Entity, node: Node, ctx: Context, out: _Outcomes) -> None:
        """This state's step for one hop."""
        raise NotImplementedError

    def route(self, node: Node, ctx: Context) -> str | None:
        """Where the job goes after this step: ``local``, ``remote`` (``ctx["to"]`` set),
        or None when no node holds its next layer."""
        if ctx["step"] == HEAD_STEP:
            host: Node | None = self.pipe.nodes.get(str(ctx["origin"]))
        else:
            host = self.pipe.host_of(int(ctx["layer"]))
        if host is None:
            return None
        if host.name == node.name:
            ctx.pop("to", None)
            return "local"
        ctx["to"] = host.name
        return "remote"


class Validate(_PipeHandler):
    """VALIDATING → DONE (job missing, pipe incomplete, origin mismatch, no end model),
    HEAD (prefill done), EMBED (more prefill chunks) or PROCESS_LAYERS."""

    step = "validate"
    state = HopState.VALIDATING

    transitions = StatusTransitions(
        outcomes={
            "invalid": Transition(HopState.DONE),
            "head": Transition(HopState.HEAD),
            "embed": Transition(HopState.EMBED),
            "layers": Transition(HopState.PROCESS_LAYERS),
        }
    )

    async def run(self, hop: Entity, node: Node, ctx: Context, out: _Outcomes) -> None:
        """Check the pipe and, for a HEAD step, the origin and its end model."""
        if not self.pipe.complete():
            out.end(hop, "invalid", Reason.PIPE_INCOMPLETE, ctx)
        elif ctx["step"] != HEAD_STEP:
            out.move(hop, "layers", ctx)
        elif ctx["origin"] != node.name:
            out.end(hop, "invalid", Reason.ORIGIN_MISMATCH, ctx)
        elif not node.end_model:
            out.end(hop, "invalid", Reason.NO_END_MODEL, ctx)
        elif ctx.get("prompt_ids") is None or ctx["prefilled"] < len(ctx["prompt_ids"]):
            out.move(hop, "embed", ctx)
        else:
            out.move(hop, "head", ctx)


class Embed(_PipeHandler):
    """EMBED → DONE (prefill update failed, no model), SEND or PROCESS_LAYERS.

    Tokenizes a new job's prompt, embeds its next prefill chunk (telling the
    client how far prefill got when it is chunked) or its last generated token.
    """

    step = "embed"
    state = HopState.EMBED
    missing = "no-model"

    transitions = StatusTransitions(
        outcomes={
            "update-failed": Transition(HopState.DONE),
            "no-model": Transition(HopState.DONE),
            "remote": Transition(HopState.SEND),
            "local": Transition(HopState.PROCESS_LAYERS),
        }
    )

    async def run(self, hop: Entity, node: Node, ctx: Context, out: _Outcomes) -> None:
        """Embed the next chunk or token; route to the first layer."""
        if not node.end_model:
            out.end(hop, "no-model", Reason.NO_END_MODEL, ctx)
            return
        if ctx.get("prompt_ids") is None:
            ctx["prompt_ids"], ctx["prefilled"] = tokenize(str(ctx["prompt"])), 0
        prompt: list[int] = ctx["prompt_ids"]
        if ctx["prefilled"] < len(prompt):
            size = int(ctx.get("chunk") or len(prompt))
            chunk = prompt[ctx["prefilled"] : ctx["prefilled"] + size]
            ctx["hidden"], ctx["kv"] = embed(chunk, int(ctx["kv"]))
            ctx["prefilled"] += len(chunk)
            chunked = size < len(prompt)
            if chunked and not self.pipe.update_client(
                hop.parent_id or "", "prefill", ctx["prefilled"]
            ):
                out.end(hop, "update-failed", Reason.CLIENT_GONE, ctx)
                return
        else:
            ctx["hidden"], ctx["kv"] = embed([ctx["tokens"][-1]], int(ctx["kv"]))
        ctx["step"], ctx["layer"] = LAYER_STEP, 0
        where = self.route(node, ctx)
        if where is None:
            out.end(hop, "no-model", Reason.NO_MODEL, ctx)
        else:
            out.move(hop, where, ctx)


class ProcessLayers(_PipeHandler):
    """PROCESS_LAYERS → DONE (no local segment), SEND, PROCESS_LAYERS (the next segment is
    local too) or HEAD (the last layer ran on the origin: the seed's "next iteration")."""

    step = "process-layers"
    state = HopState.PROCESS_LAYERS
    missing = "no-model"

    transitions = StatusTransitions(
        outcomes={
            "no-model": Transition(HopState.DONE),
            "remote": Transition(HopState.SEND),
            "local": Transition(HopState.PROCESS_LAYERS),
            "head": Transition(HopState.HEAD),
        }
    )

    async def run(self, hop: Entity, node: Node, ctx: Context, out: _Outcomes) -> None:
        """Run this node's segment that starts at the job's current layer."""
        segment = self.pipe.segment_at(node, int(ctx["layer"]))
        if segment is None:
            out.end(hop, "no-model", Reason.NO_MODEL, ctx)
            return
        ctx["hidden"] = self.pipe.run_segment(hop.parent_id or "", int(ctx["hidden"]), segment)
        ctx["layer"] = segment[1]
        if ctx["layer"] >= self.pipe.num_layers:
            ctx["step"] = HEAD_STEP
        where = self.route(node, ctx)
        if where is None:
            out.end(hop, "no-model", Reason.NO_MODEL, ctx)
        elif where == "local" and ctx["step"] == HEAD_STEP:
            out.move(hop, "head", ctx)
        else:
            out.move(hop, where, ctx)


class Head(_PipeHandler):
    """HEAD → DONE (EOS or the last token; the client went away), EMBED, PROCESS_LAYERS or
    SEND.

    Norm and head pick the next token, which goes to the client. With
    ``fuse_embed`` (the default) the origin embeds it in the same step and the
    job goes straight to its first layer (local, or remote: SEND); without,
    EMBED embeds it in a step of its own.
    """

    step = "head"
    state = HopState.HEAD
    missing = "update-failed"

    transitions = StatusTransitions(
        outcomes={
            "completed": Transition(HopState.DONE),
            "update-failed": Transition(HopState.DONE),
            "embed": Transition(HopState.EMBED),
            "local": Transition(HopState.PROCESS_LAYERS),
            "remote": Transition(HopState.SEND),
        }
    )

    async def run(self, hop: Entity, node: Node, ctx: Context, out: _Outcomes) -> None:
        """Pick the next token, tell the client, and finish or go round again."""
        tokens: list[int] = ctx["tokens"]
        token = head(int(ctx["hidden"]), len(tokens), ctx.get("stop_after"))
        tokens.append(token)
        if not self.pipe.update_client(hop.parent_id or "", "token", token):
            out.end(hop, "update-failed", Reason.CLIENT_GONE, ctx)
            return
        if token == EOS or len(tokens) >= int(ctx["max_tokens"]):
            out.end(hop, "completed", Reason.COMPLETED, ctx)
            return
        if not ctx.get("fuse_embed", True) or self.pipe.host_of(0) is None:
            out.move(hop, "embed", ctx)
            return
        ctx["hidden"], ctx["kv"] = embed([token], int(ctx["kv"]))
        ctx["step"], ctx["layer"] = LAYER_STEP, 0
        where = self.route(node, ctx)
        assert where is not None  # host_of(0) is up
        out.move(hop, where, ctx)


class Send(_PipeHandler):
    """SEND → DONE: the job goes to the node of its next layer (or back to its origin for
    HEAD), as a new hop created in this same transaction."""

    step = "send"
    state = HopState.SEND
    missing = "handed-off"  # SEND's one successor; the hop ends JOB_MISSING, nothing is sent

    transitions = StatusTransitions(outcomes={"handed-off": Transition(HopState.DONE)})

    async def run(self, hop: Entity, node: Node, ctx: Context, out: _Outcomes) -> None:
        """Send the job; its next hop starts VALIDATING on the destination."""
        destination = str(ctx.pop("to"))
        await self.pipe.send_job(HandOff(hop.parent_id or "", node.name, destination, ctx["step"]))
        out.end(hop, "handed-off", Reason.HANDED_OFF, ctx)
        out.create.append(
            NewEntity(
                HOP_KIND,
                {"node": destination, "seq": int(hop.spec.get("seq", 0)) + 1, "context": ctx},
                parent_id=hop.parent_id,
                status=HopState.VALIDATING,
                by=hop.id,
            )
        )


class ExpireStale(LifecycleHandler):
    """Any live hop that held its state for 60 s (``StatusAge``, in the fetch's SQL) → DONE,
    STALE: its node stopped answering. ``lp-finish`` then fails the job.

    The daemon never wakes it on a hop's move (a hop that just moved is 60 s too young
    for its filter: drover.coordinator.wakes); it ticks on its interval."""

    kind = HOP_KIND
    status_info_meanings = {str(k): v for k, v in REASON_MEANINGS.items()}
    candidate_filters = (StatusAge(seconds=STALE_AFTER),)

    @classmethod
    def name(cls) -> str:
        """``lp-stale``."""
        return "lp-stale"

    @property
    def target_statuses(self) -> frozenset[str]:
        """Every live hop state."""
        return frozenset(HopState) - {HopState.DONE}

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        """``stale`` → DONE."""
        return StatusTransitions(outcomes={"stale": Transition(HopState.DONE)})

    @classmethod
    def default_options(cls) -> HandlerOptions:
        """No tries limit, no timeout."""
        return HandlerOptions(max_retries=None, timeout=None, batch_size=1000)

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """Every fetched hop is stale."""
        ids = [t.id for t in targets]
        return HandlerResult(
            outcomes=dict.fromkeys(ids, "stale"),
            status_infos=dict.fromkeys(ids, Reason.STALE),
            results=dict.fromkeys(ids, "FAILURE"),
            messages={
                t.id: f"no progress in {t.status} on node {t.spec.get('node')} "
                f"for {STALE_AFTER:.0f}s"
                for t in targets
            },
        )


class FinishJobs(LifecycleHandler):
    """RUNNING → COMPLETED (its text saved in ``data``) or FAILED (the last hop's reason),
    once every hop of the job is DONE (``Children``, in the fetch's SQL).

    The daemon wakes it when a hop ends (its filter reads the job's hops), so a job
    ends right after its last hop, not on this handler's interval."""

    kind = JOB_KIND
    status_info_meanings = {str(k): v for k, v in REASON_MEANINGS.items()}
    candidate_filters = (Children(frozenset({HopState.DONE}), KernelMatchType.ALL),)

    @classmethod
    def name(cls) -> str:
        """``lp-finish``."""
        return "lp-finish"

    @property
    def target_statuses(self) -> frozenset[str]:
        """Running jobs."""
        return frozenset({JobState.RUNNING})

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        """``completed`` → COMPLETED, ``failed`` → FAILED."""
        return StatusTransitions(
            outcomes={
                "completed": Transition(JobState.COMPLETED),
                "failed": Transition(JobState.FAILED),
            }
        )

    @classmethod
    def default_options(cls) -> HandlerOptions:
        """No tries limit, no timeout."""
        return HandlerOptions(max_retries=None, timeout=None, batch_size=1000)

    async def execute(self, targets: Sequence[Entity]) -> HandlerResult:
        """The job ends as its last hop did."""
        out = _Outcomes()
        for job in targets:
            last = max(job.children, key=lambda hop: int(hop.spec.get("seq", 0)))
            ctx = context_of(last) or {}
            tokens = list(ctx.get("tokens", []))
            out.data[job.id] = {"tokens": tokens, "text": detokenize(tokens)}
            if last.status_info == Reason.COMPLETED:
                out.outcomes[job.id] = "completed"
            else:
                out.outcomes[job.id] = "failed"
                reason = Reason(last.status_info) if last.status_info in set(Reason) else None
                out.infos[job.id] = str(last.status_info)
                if reason is not None:
                    out.messages[job.id] = REASON_MEANINGS[reason]
        return out.result()


HOP_STEPS: tuple[type[_PipeHandler], ...] = (Validate, Embed, ProcessLayers, Head, Send)


def make_handlers(pipe: Pipe) -> list[LifecycleHandler]:
    """Every handler of the pack, sharing ``pipe``."""
    return [*(step(pipe) for step in HOP_STEPS), ExpireStale(), FinishJobs()]
