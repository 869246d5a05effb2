"""Drafters: how the next window is proposed from what the last forward revealed.

A drafter sees, per window slot, its ``belief`` (the newest, possibly stale, target for that
position, or the layout's prior for positions never evaluated) and the draft that sat there before
with the ``q`` it was drawn from. It returns new drafts and, for each, the exact distribution it was
drawn from given everything the verifier will have seen: that ``q`` is what keeps a decoder
lossless (docs/DESIGN.md §2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch

from ..core.checks import integer, number
from ..core.draws import Draws
from ..core.errors import ConfigError
from ..core.mrs import couple
from ..core.registry import register
from ..core.rng import Stream


@dataclass
class Slots:
    """The next window, one entry per slot [B, W]."""

    positions: torch.Tensor  # absolute generated position of each slot
    belief: torch.Tensor  # [B, W, V] target to draft from, a table over the id span (Draws.local)
    has_belief: torch.Tensor  # bool: belief is a model output (else the layout's prior)
    old_tokens: torch.Tensor  # draft previously at this position (valid where has_old)
    old_q: torch.Tensor  # [B, W, V] distribution that old draft was drawn from
    has_old: torch.Tensor  # bool: an earlier draft exists and was not verified away
    support: torch.Tensor | None = None  # [B, W, K] columns outside which a model belief is zero
    # [B, W] the committed token at the same cell one frame (a clip) or one row (an image) earlier,
    # -1 where it is not committed yet (the copy drafter's source)
    previous: torch.Tensor | None = None
    plan: Any = None  # the schedule's record of this iteration, handed on to its segments (drafters ignore it)


def earlier(
    board: torch.Tensor, positions: torch.Tensor, offset: int, settled: Callable[[torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """The committed token ``offset`` positions before each slot [B, W] of ``board`` [B, L], -1 where
    that position lies before the start or is not committed (``settled(at)``: which board positions
    ``at`` [B, W] are; the schedule knows, from its counts)."""
    src = positions - offset
    at = src.clamp(0, board.shape[1] - 1)
    return torch.where((src >= 0) & (src == at) & settled(at), board.gather(1, at), -1)


class Drafter:
    def start(self, batch: int, slots: int, vocab: int, device) -> None:
        """Reset per-run state (only stateful drafters need it)."""

    def reset(self, rows: torch.Tensor) -> None:
        """Forget what batch rows ``rows`` (bool [B]) saw: they now decode a new sequence."""

    def select(self, rows: torch.Tensor) -> None:
        """Keep only batch rows ``rows`` (indices), in that order: finished rows leave the batch."""

    def draft(self, slots: Slots, draws: Draws) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError


@register("sjd", "drafter", "independent drafts from the belief (SJD)")
class Independent(Drafter):
    """SJD: a fresh independent draw from the belief."""

    def draft(self, slots, draws):
        return draws.sample(slots.belief, slots.positions, Stream.DRAFT), slots.belief


@dataclass(eq=False)
class CouplingStrength(Drafter):
    """SCD's coupling strength ``alpha``: each slot, each iteration, is coupled with probability
    alpha (a coin of its own stream) and drawn afresh otherwise: 0 is SJD's independent drafting,
    1 full coupling. Either branch is a draw from the belief, so every alpha keeps q = p."""

    alpha: float = 1.0

    def __post_init__(self):
        a = self.alpha
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not 0 <= a <= 1:
            raise ConfigError(f"alpha (coupling strength) must be a number in [0, 1], got {a!r}")

    def coupled(self, slots: Slots, draws: Draws, where: torch.Tensor) -> torch.Tensor:
        if self.alpha == 1:
            return where
        return where & (draws.uniform(slots.positions, Stream.MIX) < self.alpha)


@register("scd-mc", "drafter", "SCD maximal coupling: tail drafts kept with prob min(1, p/q)")
class Coupled(CouplingStrength):
    """SCD maximal coupling (= SJD-PAC adaptive continuation): keep the old draft with probability
    min(1, p/q) under the new belief p, else draw from the residual. The result is ~ p, so q = p."""

    def draft(self, slots, draws):
        fresh = draws.sample(slots.belief, slots.positions, Stream.DRAFT)
        kept = couple(
            slots.belief,
            slots.old_q,
            draws.local(slots.old_tokens),
            draws.uniform(slots.positions, Stream.COUPLE),
            draws.uniform(slots.positions, Stream.COUPLE, 1),
        )
        return torch.where(self.coupled(slots, draws, slots.has_old), kept + draws.lo, fresh), slots.belief


@register("scd-gs", "drafter", "SCD Gumbel sharing: drafts argmax(log p + g), g fixed per position")
class GumbelShared(CouplingStrength):
    """SCD Gumbel sharing: argmax(log p + g) with g fixed per (seed, position) across iterations,
    so a draft changes only when p moves enough. Still a draw from p, so q = p.

    When the slots name each model belief's support (the columns of the sampling's top-k ids), the
    argmax runs over those ids only (the others have log p = -inf) and slots holding the layout's
    prior get a plain draw: nothing is coupled before a position has a model belief."""

    def draft(self, slots, draws):
        p = slots.belief
        shared = draws.choose(p, slots.positions, slots.support)
        if slots.support is None:  # every slot may share, prior or not
            if self.alpha == 1:
                return shared, p
            sharing = torch.ones_like(slots.has_belief)
        else:
            sharing = slots.has_belief
        return torch.where(
            self.coupled(slots, draws, sharing), shared, draws.sample(p, slots.positions, Stream.DRAFT)
        ), p


MAX_HISTORY = 64  # beliefs kept per window slot: [batch, slots, history, vocab] floats


@register(
    "vp", "wrapper", "SJD-VP: the drafter drafts from p fused with each position's probability trajectory", prefix="vp_"
)
@dataclass(eq=False)
class VerificationPrior(Drafter):
    """SJD-VP: reshape the belief with each position's probability trajectory, then let ``base``
    draft from the fused p' and record q = p'.

    Per position we keep the last ``history`` beliefs it received while in the window. The
    reference is their exponentially weighted average (``decay`` per step back). Ids in the top-k
    of p whose probability rose in each of the last ``growth_steps`` iterations get
    ``weight * (log p - log reference)`` added to log p.
    """

    STATE: ClassVar = ("past", "count", "owner", "base")  # what a step reads and replaces (decode.replay)

    base: Drafter
    history: int = 4
    growth_steps: int = 3
    top_k: int = 50
    weight: float = 1.0
    decay: float = 0.5

    def __post_init__(self):
        self.history = integer("vp_history", self.history, 1, MAX_HISTORY)
        self.growth_steps = integer("vp_growth_steps", self.growth_steps, 1, self.history)
        self.top_k = integer("vp_top_k", self.top_k, 1)
        self.weight, self.decay = number("vp_weight", self.weight, 0), number("vp_decay", self.decay, 0, 1)

    def start(self, batch, slots, vocab, device):
        self.base.start(batch, slots, vocab, device)
        # ring buffer over positions modulo the window: a slot's owner changes only after commit
        self.past = torch.zeros(batch, slots, self.history, vocab, device=device)
        self.owner = torch.full((batch, slots), -1, dtype=torch.int64, device=device)
        self.count = torch.zeros(batch, slots, dtype=torch.int64, device=device)

    def reset(self, rows):
        self.base.reset(rows)
        self.owner[rows] = -1
        self.count[rows] = 0

    def select(self, rows):
        self.base.select(rows)
        self.past, self.owner, self.count = self.past[rows], self.owner[rows], self.count[rows]

    def fuse(self, p: torch.Tensor, past: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        """p [..., V], past [..., H, V] newest first, count [...] valid entries -> fused p'.

        Only ids in the top-k of p can be boosted, so the trajectory is read on that slice alone."""
        w = self.decay ** torch.arange(self.history, device=p.device, dtype=p.dtype)
        w = w * (torch.arange(self.history, device=p.device) < count[..., None])
        top = p.topk(min(self.top_k, p.shape[-1]), -1, sorted=False).indices  # [..., k]
        p_top = p.gather(-1, top)
        past_top = past.gather(-1, top.unsqueeze(-2).expand(*past.shape[:-1], top.shape[-1]))
        ref = (w[..., None] * past_top).sum(-2) / w.sum(-1, keepdim=True).clamp(min=1e-30)
        tiny = torch.finfo(p.dtype).tiny
        score = p_top.clamp(min=tiny).log() - ref.clamp(min=tiny).log()
        trail = torch.cat([p_top[..., None, :], past_top[..., : self.growth_steps, :]], -2)
        rising = (trail[..., :-1, :] > trail[..., 1:, :]).all(-2)
        boost = torch.where(rising & (p_top > 0), self.weight * score, 0.0)
        # softmax(log p + boost) with boost zero off the slice, stabilised by the largest boost c:
        # off the slice p e^-c / Z, on it p e^(boost - c) / Z
        c = boost.amax(-1, keepdim=True).clamp(min=0)
        lifted = p_top * (boost - c).exp()
        off = (-c).exp()
        z = off * (p.sum(-1, keepdim=True) - p_top.sum(-1, keepdim=True)) + lifted.sum(-1, keepdim=True)
        fused = (p * (off / z)).scatter_(-1, top, lifted / z)
        ready = (count >= self.growth_steps)[..., None]
        return torch.where(ready, fused, p)

    def draft(self, slots, draws):
        b = torch.arange(slots.positions.shape[0], device=slots.positions.device)[:, None]
        ring = slots.positions % self.owner.shape[1]
        fresh_owner = self.owner[b, ring] != slots.positions
        count = torch.where(fresh_owner, 0, self.count[b, ring])
        past = self.past[b, ring]
        fused = torch.where(slots.has_belief[..., None], self.fuse(slots.belief, past, count), slots.belief)

        pushed = torch.cat([slots.belief[..., None, :], past[..., :-1, :]], -2)
        self.past[b, ring] = torch.where(slots.has_belief[..., None, None], pushed, past)
        self.count[b, ring] = torch.where(slots.has_belief, (count + 1).clamp(max=self.history), count)
        self.owner[b, ring] = slots.positions
        return self.base.draft(replace(slots, belief=fused), draws)


@register(
    "copy",
    "wrapper",
    "frame copy: the committed token one frame (clip) or one row (image) earlier, as a draft",
    prefix="copy_",
)
@dataclass(eq=False)
class Copy(Drafter):
    """Prompt-lookup for pictures: where the same cell one frame earlier (one row earlier in an
    image) is committed and the slot has no model belief yet (it just entered the window), draft
    that token with certainty, q = its point mass; elsewhere ``base`` drafts. The source is
    committed before the verifier runs, so the draft is a deterministic function of what the
    verifier sees and the point mass is its exact q: accepted with probability p(token), else the
    residual (p without that token) is drawn.

    Once a slot has a belief, the base's coupled draft beats the copy: a point mass passes with
    probability p(token), a Gumbel-shared draft whenever the belief and the target agree, however
    flat they are (on the embedded clip model trained to copy, one clip at window 64: 358 forwards
    with scd-gs, 641 copying into every slot). ``min_p``: also copy into a slot whose belief gives
    the source at least this probability (0: wherever there is a source). The belief comes from an
    earlier forward, so the choice is fixed before the draft and q stays exact."""

    STATE: ClassVar = ("base",)

    base: Drafter
    min_p: float | None = None

    def __post_init__(self):
        if self.min_p is not None:
            self.min_p = number("copy_min_p", self.min_p, 0, 1)

    def start(self, batch, slots, vocab, device):
        self.base.start(batch, slots, vocab, device)

    def reset(self, rows):
        self.base.reset(rows)

    def select(self, rows):
        self.base.select(rows)

    def copies(self, slots: Slots, draws: Draws) -> torch.Tensor | None:
        """The slots [B, W] drafted as copies of their source (None: the layout has no source)."""
        if slots.previous is None:
            return None
        wanted = ~slots.has_belief
        if self.min_p is not None:
            wanted = wanted | (slots.belief.gather(-1, draws.local(slots.previous)[..., None])[..., 0] >= self.min_p)
        return (slots.previous >= 0) & wanted

    def draft(self, slots, draws):
        tokens, q = self.base.draft(slots, draws)
        source = self.copies(slots, draws)
        if source is None:
            return tokens, q
        point = torch.nn.functional.one_hot(draws.local(slots.previous), q.shape[-1]).to(q.dtype)
        return torch.where(source, slots.previous, tokens), torch.where(source[..., None], point, q)
