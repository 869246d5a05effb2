"""Verifiers: which drafts of a window are committed, and the token that follows them."""

from __future__ import annotations

import torch

from .draws import Draws
from .mrs import accepts, residual
from .rng import Stream


class FirstRejection:
    """SJD: accept the leading run of drafts that pass MRS; at the first rejection commit a draw from
    the residual, or, if every draft passed, a bonus draw from the next target."""

    name = "first-rejection"
    lossless = True

    def accept(self, p_d, q_d, u):
        return accepts(p_d, q_d, u)

    def residual(self, p, q):
        return residual(p, q)

    def verify(self, p: torch.Tensor, drafts: torch.Tensor, q: torch.Tensor, m: torch.Tensor,
               positions: torch.Tensor, draws: Draws) -> tuple[torch.Tensor, torch.Tensor]:
        """p [B, W+1, V] targets for positions n..n+W; drafts [B, W] ~ q [B, W, V]; m [B] drafts that
        lie inside the image; positions [B, W+1]. Returns (accepted count k [B], next token [B])."""
        w = drafts.shape[1]
        p_d = p[:, :w].gather(-1, drafts[..., None]).squeeze(-1)
        q_d = q.gather(-1, drafts[..., None]).squeeze(-1)
        ok = self.accept(p_d, q_d, draws.uniform(positions[:, :w], Stream.ACCEPT))
        ok &= torch.arange(w, device=ok.device) < m[:, None]
        k = ok.to(torch.int64).cumprod(-1).sum(-1)
        rows = torch.arange(p.shape[0], device=p.device)
        rejected = (k < m)[:, None]
        q_k = torch.where(rejected, q[rows, k.clamp(max=w - 1)] if w else 0.0, 0.0)
        target = torch.where(rejected, self.residual(p[rows, k], q_k), p[rows, k])
        return k, draws.sample(target, positions[rows, k], Stream.SAMPLE)
