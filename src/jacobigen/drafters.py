"""Drafters: how the next window is proposed from what the last forward revealed.

A drafter sees, per window slot, its ``belief`` (the newest, possibly stale, target distribution for
that position, or the layout's prior for positions never evaluated) and the draft that sat there
before with the ``q`` it was drawn from. It returns new drafts and, for each, the exact distribution
it was drawn from given everything the verifier will have seen: that ``q`` is what keeps a decoder
lossless (DESIGN.md section 2).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .draws import Draws
from .rng import Stream


@dataclass
class Slots:
    """The next window, one entry per slot [B, W]."""

    positions: torch.Tensor   # absolute generated position of each slot
    belief: torch.Tensor      # [B, W, V] target to draft from
    old_tokens: torch.Tensor  # draft previously at this position (valid where has_old)
    old_q: torch.Tensor       # [B, W, V] distribution that old draft was drawn from
    has_old: torch.Tensor     # bool: an earlier draft exists and was not verified away


class Independent:
    """SJD: a fresh independent draw from the belief."""

    name = "independent"

    def draft(self, slots: Slots, draws: Draws) -> tuple[torch.Tensor, torch.Tensor]:
        return draws.sample(slots.belief, slots.positions, Stream.DRAFT), slots.belief
