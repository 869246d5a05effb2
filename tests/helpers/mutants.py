"""Deliberately broken decoder parts: the lossy mistakes of docs/DESIGN.md §6.2. The exactness test
must reject every one of them."""

from __future__ import annotations

from dataclasses import replace

import torch

from jacobigen.core.rng import Stream
from jacobigen.parts.drafters import Copy, Coupled, GumbelShared, Independent, VerificationPrior
from jacobigen.parts.tree import ProactiveTree, TreeNodes
from jacobigen.parts.verifiers import SameAsAr, Verifier


class ResidualFromTarget(Verifier):
    """Mutant 1: on rejection draw the replacement from p instead of the residual."""

    def residual(self, p, q, d):
        return p


class StaleQ(Independent):
    """Mutant 3: verify against the q of the previous iteration (off-by-one in the history)."""

    def draft(self, slots, draws):
        tokens, q = super().draft(slots, draws)
        return tokens, torch.where(slots.has_old[..., None], slots.old_q, q)


class ResidualUnlessUnitMass(Verifier):
    """Mutant 6: a "numerical safety" residual that falls back to p unless its mass is about 1."""

    def residual(self, p, q, d):
        r = (p - q).clamp(min=0)
        mass = r.sum(-1, keepdim=True)
        return torch.where((mass - 1).abs() < 1e-3, r / mass.clamp(min=1e-30), p)


class MinimumAcceptance(Verifier):
    """Mutant 7: always accept the first draft, so every iteration commits at least two tokens."""

    def accept(self, p, q, d, u):
        ok = super().accept(p, q, d, u)
        if ok.dim() == 2:
            ok[:, :1] = True
        return ok


class CarryOldQ(Coupled):
    """Mutant 2: after coupling keeps a tail draft, carry its old q instead of the p it was kept under."""

    def draft(self, slots, draws):
        tokens, q = super().draft(slots, draws)
        kept = slots.has_old & (tokens == slots.old_tokens)
        return tokens, torch.where(kept[..., None], slots.old_q, q)


class UnfusedQ(VerificationPrior):
    """Mutant 4: SJD-VP drafts from the fused p' but records the unfused p as q."""

    def draft(self, slots, draws):
        tokens, _ = super().draft(slots, draws)
        return tokens, slots.belief


class SiblingsWithReplacement(ProactiveTree):
    """Mutant 5: tree siblings drawn with replacement, verified as if drawn without."""

    def expand(self, first, q, positions, draws):
        extra = [draws.sample(q, positions, Stream.TREE, r) for r in range(1, self.width)]
        cand = torch.stack([first, *extra], -1)
        return cand, torch.ones_like(cand, dtype=torch.bool)


class NarrowSupport(GumbelShared):
    """Not one of the seven of docs/DESIGN.md §6.2, but the same rule broken by our own shortcut: Gumbel sharing
    argmaxed over fewer ids than the belief's support (its first top-k id only)."""

    def draft(self, slots, draws):
        if slots.support is not None:
            slots = replace(slots, support=slots.support[..., :1])
        return super().draft(slots, draws)


class PeekingTree(Verifier):
    """Not one of the seven of docs/DESIGN.md §6.2, but the rule the budgeted tree must keep: its shape may depend
    on q, never on p. This one spends the budget after the forward: of the nodes in the block it
    keeps the ``budget`` off-spine ones that the target, not the draft, values most (product of p
    along the path), as a budget rule that read the fresh targets would."""

    budget = 2

    def verify(self, p, window, m, positions, draws, tree=None, support=None):
        if tree is not None:
            uni, v = tree.universe, p.shape[-1]
            at = torch.where(uni.parent >= 0, tree.index.gather(1, uni.parent.clamp(min=0).expand(p.shape[0], -1)), 0)
            cand = window.cand.flatten(1)[:, uni.flat]
            p_c = p.gather(1, at.clamp(min=0)[..., None].expand(-1, -1, v)).gather(-1, draws.local(cand)[..., None])[
                ..., 0
            ]
            by_p = torch.ones_like(p_c)
            for t in range(1, uni.levels + 1):  # product of p along each node's path
                lvl = uni.level == t
                up = by_p.gather(1, uni.parent.clamp(min=0).expand(p.shape[0], -1))
                by_p = torch.where(lvl, p_c * torch.where(uni.parent >= 0, up, 1.0), by_p)
            scores = uni.scores(by_p, tree.index >= 0)
            best = torch.where(uni.spine, float("-inf"), scores).topk(self.budget, 1).values[:, -1:]
            keep = uni.spine | ((scores >= best) & (scores > float("-inf")))
            tree = TreeNodes(uni, torch.where(keep, tree.index, -1), tree.spine, tree.ranks)
        return super().verify(p, window, m, positions, draws, tree, support)


class CopyWithBaseQ(Copy):
    """The frame-copy drafter proposes the copied token but records the base drafter's q
    (a point-mass draft verified as if it had been drawn from the belief)."""

    def draft(self, slots, draws):
        tokens, _ = super().draft(slots, draws)
        return tokens, self.base.draft(slots, draws)[1]


def keep_full_copy() -> list:
    """Loader mutant: the streaming load keeps a copy of every tensor it reads (as a load that builds
    the whole state dict, or converts beside the originals, does). The load-peak test must fail it."""
    from jacobigen.models.families import stream

    kept: list = []
    read = stream.Checkpoint.read

    def reads_and_keeps(self, key, what="the checkpoint"):
        t = read(self, key, what)
        kept.append(t.clone())
        return t

    stream.Checkpoint.read = reads_and_keeps  # type: ignore[method-assign]
    return kept


class NoiseAcrossPositions(SameAsAr):
    """The invariant verifier with one Gumbel vector per sequence instead of one per position: each
    token alone is an exact Gumbel-max draw, but every position reuses the same noise, so the
    tokens of a sequence are correlated (a seed-keyed sampler that forgot the position key)."""

    def targets(self, p, support, positions, draws):
        columns = torch.arange(p.shape[-1], device=p.device)
        chosen = (p.log() + draws.shared_gumbel(torch.zeros_like(positions), columns)).argmax(-1, keepdim=True)
        return torch.zeros_like(p).scatter_(-1, chosen, 1.0)
