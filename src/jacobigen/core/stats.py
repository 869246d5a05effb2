"""Decoding statistics, returned as data (docs/DESIGN.md §5.4)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


def step_compression(ar_nfe: float, nfe: float) -> float:
    """The one definition of step compression: AR's forward passes over a method's, for the same
    images (both per image, or both summed over the images); 0 when nothing ran. AR takes one
    pass per generated token (``layout.length``, the first from the prefill)."""
    return ar_nfe / nfe if nfe else 0.0


@dataclass
class DecodeStats:
    """Counts for one decode call of B sequences.

    ``nfe`` counts forward passes of the whole batch, prefills included (a CFG pair is one pass).
    ``sequence_nfe[b]`` is the number of passes sequence b took part in: its prefill (which also
    gives its first token) and every iteration until it finished. ``committed`` holds, per
    iteration, the tokens each running sequence committed; ``nodes`` the block nodes it evaluated
    in that forward (its window, or PJD's segments), and ``sibling_tokens`` how many of its
    committed tokens came from off-spine tree nodes (a sibling or below one).
    """

    batch: int
    nfe: int = 0
    sequence_nfe: list[int] = field(default_factory=list)
    committed: list[int] = field(default_factory=list)
    nodes: list[int] = field(default_factory=list)
    sibling_tokens: list[int] = field(default_factory=list)
    wall_time: float = 0.0
    forward_time: float | None = 0.0
    capture_time: float = 0.0  # warm steps and graph recordings of a replayed step (inside wall_time)
    forward_path: str = "eager"  # graphed, eager, eager (graphs failed: why), compiled step (Engine.forward_path)
    lossless: bool = True  # False for relaxed (lossy) verifiers
    quantize: str | None = None  # the target model's weight quantization (int8, int4), None: its own dtype
    dtype: str | None = None  # the target model's dtype (float32, bfloat16, float16): the distribution sampled
    when: torch.Tensor | None = field(default=None, repr=False, compare=False)  # [B, length] iteration
    #   that committed each token (0: the prefill): the acceptance map
    _pending: list = field(default_factory=list, repr=False, compare=False)

    @classmethod
    def start(cls, batch: int) -> DecodeStats:
        return cls(batch=batch, sequence_nfe=[0] * batch)

    def admit(self, sequences: list[int]) -> None:
        """These sequences were prefilled (one pass each, one token each)."""
        for s in sequences:
            self.sequence_nfe[s] += 1

    def record(
        self,
        sequences: torch.Tensor,
        step: torch.Tensor,
        active: torch.Tensor,
        nodes: torch.Tensor,
        siblings: torch.Tensor,
    ) -> None:
        """One iteration: row r decoded sequence ``sequences[r]``, evaluated ``nodes[r]`` block
        nodes and committed ``step[r]`` tokens, ``siblings[r]`` of them off the spine. Kept on the
        device until :meth:`finish`, so recording costs no host sync."""
        # one stacked copy: a replayed step rewrites its outputs in place at the next step
        self._pending.append(torch.stack([torch.where(active, sequences, -1), step, nodes, siblings]))

    def finish(self, nfe: int, wall: float, forward: float | None) -> None:
        if self._pending:
            seq, step, nodes, siblings = (torch.cat(x) for x in zip(*self._pending, strict=True))
            active = seq >= 0
            for s in seq[active].tolist():
                self.sequence_nfe[s] += 1
            self.committed += step[active].tolist()
            self.nodes += nodes[active].tolist()
            self.sibling_tokens += siblings[active].tolist()
            self._pending.clear()
        self.nfe, self.wall_time, self.forward_time = nfe, wall, forward

    @property
    def overhead_time(self) -> float | None:
        """Everything but the model forward: drafting, verification, cache bookkeeping (None when
        the forward was not timed: an accelerator without ``timing=True``)."""
        return None if self.forward_time is None else self.wall_time - self.forward_time

    @property
    def tokens(self) -> int:
        return sum(self.committed) + self.batch

    @property
    def mean_accepted(self) -> float:
        """Tokens committed per forward pass, averaged over sequences and iterations."""
        return self.tokens / max(sum(self.sequence_nfe), 1)

    @property
    def nodes_per_iteration(self) -> float:
        return sum(self.nodes) / max(len(self.nodes), 1)

    @property
    def tokens_per_node(self) -> float:
        """Accepted tokens per evaluated block node (the sampled token of each iteration included)."""
        return sum(self.committed) / max(sum(self.nodes), 1)

    def step_compression(self, ar_nfe: float) -> float:
        """:func:`step_compression` of these sequences, ``ar_nfe`` being AR's passes per sequence."""
        return step_compression(ar_nfe * len(self.sequence_nfe), sum(self.sequence_nfe))

    def histogram(self) -> dict[int, int]:
        """Iterations by number of tokens they committed."""
        counts: dict[int, int] = {}
        for c in self.committed:
            counts[c] = counts.get(c, 0) + 1
        return dict(sorted(counts.items()))

    def as_dict(self) -> dict:
        return {
            "batch": self.batch,
            "lossless": self.lossless,
            "quantize": self.quantize,
            "dtype": self.dtype,
            "nfe": self.nfe,
            "sequence_nfe": self.sequence_nfe,
            "tokens": self.tokens,
            "mean_accepted": self.mean_accepted,
            "histogram": self.histogram(),
            "nodes_per_iteration": self.nodes_per_iteration,
            "tokens_per_node": self.tokens_per_node,
            "sibling_tokens": sum(self.sibling_tokens),
            "wall_time": self.wall_time,
            "forward_time": self.forward_time,
            "overhead_time": self.overhead_time,
            "capture_time": self.capture_time,
            "forward_path": self.forward_path,
        }
