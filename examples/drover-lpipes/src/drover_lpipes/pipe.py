"""A simulated pipe: nodes holding layer segments, a deterministic fake model, the clients.

Where Language Pipes runs a transformer split across machines, this runs a
few integer functions: ``embed`` folds tokens into the job's running state
(its "KV cache"), ``layer(h, i)`` is layer ``i``, ``head`` picks the next
token. The same functions applied without any pipe (:func:`reference`) give
the tokens a correct pipeline must produce, so a test can check that every
layer ran once, in order, for every token, whichever nodes ran it.

Nothing here decides a status: the handlers read it and report outcomes.
"""

from __future__ import annotations

import zlib
from collections.abc import Awaitable, Callable, Sequence

import attrs

#: The fake vocabulary's size; token 0 is EOS.
VOCAB = 1000
EOS = 0
_MASK = (1 << 31) - 1
WORDS = (
    "the", "pipe", "carries", "a", "token", "through", "every", "layer", "and", "back",
    "to", "its", "origin", "where", "head", "picks", "next", "one", "for", "client",
)  # fmt: skip


def tokenize(prompt: str) -> list[int]:
    """The prompt's token ids (one per word; never EOS)."""
    return [1 + zlib.crc32(word.encode()) % (VOCAB - 1) for word in prompt.split()]


def detokenize(tokens: Sequence[int]) -> str:
    """Text for generated token ids (EOS is not printed)."""
    return " ".join(WORDS[t % len(WORDS)] for t in tokens if t != EOS)


def embed(tokens: Sequence[int], kv: int) -> tuple[int, int]:
    """Embed ``tokens`` after the state ``kv``: the hidden state and the new state."""
    for token in tokens:
        kv = (kv * 1_000_003 + token * 7919 + 1) & _MASK
    return kv, kv


def layer(hidden: int, index: int) -> int:
    """Layer ``index`` of the fake model."""
    return (hidden * 31 + index * 17 + 7) & _MASK


def head(hidden: int, position: int, stop_after: int | None) -> int:
    """Norm and head: the token at ``position`` (0 first); EOS at ``stop_after``."""
    if stop_after is not None and position >= stop_after:
        return EOS
    return 1 + hidden % (VOCAB - 1)


def reference(
    prompt: str, num_layers: int, max_tokens: int, stop_after: int | None = None
) -> list[int]:
    """The tokens the fake model generates for ``prompt`` on one machine."""
    hidden, kv = embed(tokenize(prompt), 0)
    tokens: list[int] = []
    while True:
        for index in range(num_layers):
            hidden = layer(hidden, index)
        token = head(hidden, len(tokens), stop_after)
        tokens.append(token)
        if token == EOS or len(tokens) >= max_tokens:
            return tokens
        hidden, kv = embed([token], kv)


@attrs.define
class Node:
    """One machine: the layer ranges it holds (``[start, end)``), whether it has the end
    model (embedding, norm, head: an origin node), whether it is up."""

    name: str
    segments: list[tuple[int, int]]
    end_model: bool = False
    up: bool = True


@attrs.frozen
class HandOff:
    """One ``Pipe.send_job``: which job, from which node, to which, carrying which step."""

    job_id: str
    source: str
    destination: str
    step: str


class Pipe:
    """The nodes of one model's pipe, the clients waiting for tokens, and what was sent.

    ``on_send`` (tests) is awaited during each hand-off's ``send_job``, while no
    transaction is open: the network's latency, in which anything may happen.
    """

    def __init__(self, nodes: Sequence[Node], num_layers: int) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.num_layers = num_layers
        self.sent: list[HandOff] = []
        #: Updates each client received, by job: ``("prefill", n)`` and ``("token", id)``.
        self.updates: dict[str, list[tuple[str, int]]] = {}
        #: Jobs whose client went away.
        self.gone: set[str] = set()
        #: Layer indices run, by job, in order (tests check each token ran every layer).
        self.layers_run: dict[str, list[int]] = {}
        self.on_send: Callable[[HandOff], Awaitable[None]] | None = None

    def node(self, name: str) -> Node | None:
        """The node called ``name`` if it is up."""
        found = self.nodes.get(name)
        return found if found is not None and found.up else None

    def up(self) -> list[str]:
        """The names of the nodes that are up (the hops a coordinator here may run)."""
        return sorted(n.name for n in self.nodes.values() if n.up)

    def segment_at(self, node: Node, index: int) -> tuple[int, int] | None:
        """``node``'s segment that starts at layer ``index``."""
        return next((s for s in node.segments if s[0] == index), None)

    def host_of(self, index: int) -> Node | None:
        """The up node holding a segment that starts at layer ``index``."""
        return next(
            (n for n in self.nodes.values() if n.up and self.segment_at(n, index) is not None),
            None,
        )

    def complete(self) -> bool:
        """Whether every layer, from the first, is held by an up node's segment, in order."""
        index = 0
        while index < self.num_layers:
            host = self.host_of(index)
            if host is None:
                return False
            segment = self.segment_at(host, index)
            assert segment is not None
            index = segment[1]
        return True

    def run_segment(self, job_id: str, hidden: int, segment: tuple[int, int]) -> int:
        """Run layers ``[start, end)`` on ``hidden``."""
        ran = self.layers_run.setdefault(job_id, [])
        for index in range(*segment):
            hidden = layer(hidden, index)
            ran.append(index)
        return hidden

    def update_client(self, job_id: str, what: str, value: int) -> bool:
        """Send the client an update; False if it went away."""
        if job_id in self.gone:
            return False
        self.updates.setdefault(job_id, []).append((what, value))
        return True

    async def send_job(self, hand_off: HandOff) -> None:
        """Hand the job to another node (recorded; ``on_send`` runs meanwhile)."""
        if self.on_send is not None:
            await self.on_send(hand_off)
        self.sent.append(hand_off)


def three_node_pipe(num_layers: int = 30) -> Pipe:
    """The demo's pipe: ``a`` (origin, end model and the first third), ``b``, ``c``."""
    third = num_layers // 3
    return Pipe(
        [
            Node("a", [(0, third)], end_model=True),
            Node("b", [(third, 2 * third)]),
            Node("c", [(2 * third, num_layers)]),
        ],
        num_layers,
    )
