"""Decoding statistics, returned as data (DESIGN.md section 5)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class DecodeStats:
    """Counts for one decode call of B sequences.

    ``nfe`` counts forward passes of the whole batch, prefills included (a CFG pair is one pass).
    ``sequence_nfe[b]`` is the number of passes sequence b took part in: its prefill (which also
    gives its first token) and every iteration until it finished. ``committed`` holds, per
    iteration, the tokens each running sequence committed.
    """

    batch: int
    nfe: int = 0
    sequence_nfe: list[int] = field(default_factory=list)
    committed: list[int] = field(default_factory=list)
    wall_time: float = 0.0
    forward_time: float = 0.0
    lossless: bool = True        # False for relaxed (lossy) verifiers

    @classmethod
    def start(cls, batch: int) -> "DecodeStats":
        return cls(batch=batch, sequence_nfe=[0] * batch)

    def admit(self, sequences: list[int]) -> None:
        """These sequences were prefilled (one pass each, one token each)."""
        for s in sequences:
            self.sequence_nfe[s] += 1

    def record(self, sequences: torch.Tensor, step: torch.Tensor, active: torch.Tensor) -> None:
        """One iteration: row r decoded sequence ``sequences[r]`` and committed ``step[r]`` tokens."""
        for s, c in zip(sequences[active].tolist(), step[active].tolist()):
            self.sequence_nfe[s] += 1
            self.committed.append(c)

    def finish(self, nfe: int, wall: float, forward: float) -> None:
        self.nfe, self.wall_time, self.forward_time = nfe, wall, forward

    @property
    def overhead_time(self) -> float:
        """Everything but the model forward: drafting, verification, cache bookkeeping."""
        return self.wall_time - self.forward_time

    @classmethod
    def concat(cls, parts: list["DecodeStats"]) -> "DecodeStats":
        """Stats of decode calls run one after another, as one call."""
        out = cls(batch=sum(p.batch for p in parts), lossless=all(p.lossless for p in parts))
        for p in parts:
            out.nfe += p.nfe
            out.sequence_nfe += p.sequence_nfe
            out.committed += p.committed
            out.wall_time += p.wall_time
            out.forward_time += p.forward_time
        return out

    @property
    def tokens(self) -> int:
        return sum(self.committed) + self.batch

    @property
    def mean_accepted(self) -> float:
        """Tokens committed per forward pass, averaged over sequences and iterations."""
        return self.tokens / max(sum(self.sequence_nfe), 1)

    def histogram(self) -> dict[int, int]:
        """Iterations by number of tokens they committed."""
        counts: dict[int, int] = {}
        for c in self.committed:
            counts[c] = counts.get(c, 0) + 1
        return dict(sorted(counts.items()))

    def as_dict(self) -> dict:
        return {
            "batch": self.batch, "lossless": self.lossless, "nfe": self.nfe, "sequence_nfe": self.sequence_nfe,
            "tokens": self.tokens, "mean_accepted": self.mean_accepted,
            "histogram": self.histogram(), "wall_time": self.wall_time,
            "forward_time": self.forward_time, "overhead_time": self.overhead_time,
        }
