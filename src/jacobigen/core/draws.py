"""Named random draws for one decoding iteration, keyed by (sequence seed, position, iteration).

A decoder's tables (targets, drafts' q) cover the layout's id span [lo, hi): column i is id lo + i.
Draws know ``lo``, so that a sample is a model id and the noise of an id is keyed by its number,
whatever the span (the same noise, and tokens, as tables that start at id 0)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import rng


@dataclass(frozen=True)
class Draws:
    seeds: torch.Tensor  # [B] one seed per sequence
    iteration: torch.Tensor  # [B] iterations this sequence has run
    lo: int = 0  # the id of the tables' column 0

    def repeat(self, n: int) -> Draws:
        """The same sequences' draws for n chains per sequence (rows b*n .. b*n + n-1)."""
        if n == 1:
            return self
        return Draws(self.seeds.repeat_interleave(n), self.iteration.repeat_interleave(n), self.lo)

    def local(self, ids: torch.Tensor) -> torch.Tensor:
        """The table column of model ``ids``; an id below the span (-1: no token) reads column 0,
        where callers mask it out."""
        return (ids - self.lo).clamp(min=0)

    def uniform(self, positions: torch.Tensor, stream: torch.Tensor | int, *extra: torch.Tensor | int) -> torch.Tensor:
        """Uniforms shaped like ``positions`` [B, ...], independent across streams and extras."""
        shape = (-1,) + (1,) * (positions.dim() - 1)
        return rng.uniform(stream, self.seeds.view(shape), positions, self.iteration.view(shape), *extra)

    def gumbel(self, positions: torch.Tensor, width: int, stream: int) -> torch.Tensor:
        """Fresh Gumbel noise [B, ..., width] for this iteration, one per table column."""
        shape = (-1,) + (1,) * positions.dim()
        ids = self.lo + torch.arange(width, device=positions.device)
        return rng.gumbel(stream, self.seeds.view(shape), positions[..., None], self.iteration.view(shape), ids)

    def shared_gumbel(self, positions: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        """Gumbel noise fixed per (seed, position, id) for every iteration (SCD sharing), for table
        ``columns`` [V] (every column) or [B, ..., K] (a few per position): [B, ..., V or K]."""
        shape = (-1,) + (1,) * positions.dim()
        return rng.gumbel(rng.Stream.GUMBEL, self.seeds.view(shape), positions[..., None], self.lo + columns)

    def choose(self, probs: torch.Tensor, positions: torch.Tensor, support: torch.Tensor | None = None) -> torch.Tensor:
        """Model ids drawn from tables ``probs`` [B, ..., width] by Gumbel-max with the noise fixed per
        (seed, position, id): ``argmax(log p + g)``, a function of the seed and p alone, whatever the
        order of computation, the window or the batch (docs/DESIGN.md §10). ``support`` [B, ..., K]:
        columns outside which p is zero (the argmax runs over them alone; the same id either way)."""
        if support is None:
            columns = torch.arange(probs.shape[-1], device=probs.device)
            return (probs.log() + self.shared_gumbel(positions, columns)).argmax(-1) + self.lo
        keys = probs.gather(-1, support).log() + self.shared_gumbel(positions, support)
        return support.gather(-1, keys.argmax(-1, keepdim=True)).squeeze(-1) + self.lo

    def sample(
        self, probs: torch.Tensor, positions: torch.Tensor, stream: torch.Tensor | int, *extra: torch.Tensor | int
    ) -> torch.Tensor:
        """Model ids drawn from tables ``probs`` [B, ..., width]."""
        return rng.categorical(probs, self.uniform(positions, stream, *extra).to(probs.device)) + self.lo
