"""Named random draws for one decoding iteration, keyed by (sequence seed, position, iteration)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import rng


@dataclass(frozen=True)
class Draws:
    seeds: torch.Tensor  # [B] one seed per sequence
    iteration: torch.Tensor  # [B] iterations this sequence has run

    def repeat(self, n: int) -> Draws:
        """The same sequences' draws for n chains per sequence (rows b*n .. b*n + n-1)."""
        if n == 1:
            return self
        return Draws(self.seeds.repeat_interleave(n), self.iteration.repeat_interleave(n))

    def uniform(self, positions: torch.Tensor, stream: torch.Tensor | int, *extra: torch.Tensor | int) -> torch.Tensor:
        """Uniforms shaped like ``positions`` [B, ...], independent across streams and extras."""
        shape = (-1,) + (1,) * (positions.dim() - 1)
        return rng.uniform(stream, self.seeds.view(shape), positions, self.iteration.view(shape), *extra)

    def gumbel(self, positions: torch.Tensor, vocab: int, stream: int) -> torch.Tensor:
        """Fresh Gumbel noise [B, ..., V] for this iteration."""
        shape = (-1,) + (1,) * positions.dim()
        ids = torch.arange(vocab, device=positions.device)
        return rng.gumbel(stream, self.seeds.view(shape), positions[..., None], self.iteration.view(shape), ids)

    def shared_gumbel(self, positions: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Gumbel noise fixed per (seed, position, id) for every iteration (SCD sharing), for ``ids``
        [V] (every id) or [B, ..., K] (a few ids per position): [B, ..., V or K]."""
        shape = (-1,) + (1,) * positions.dim()
        return rng.gumbel(rng.Stream.GUMBEL, self.seeds.view(shape), positions[..., None], ids)

    def sample(
        self, probs: torch.Tensor, positions: torch.Tensor, stream: torch.Tensor | int, *extra: torch.Tensor | int
    ) -> torch.Tensor:
        return rng.categorical(probs, self.uniform(positions, stream, *extra).to(probs.device))
