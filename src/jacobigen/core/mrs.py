"""Modified rejection sampling, the rule that makes a decoder lossless (docs/DESIGN.md §2).

A draft ``d ~ q`` is kept with probability ``min(1, p(d)/q(d))``; otherwise the replacement comes
from the residual ``norm(max(p - q, 0))``. The result is distributed as ``p``. All functions are
pure and batched over leading dimensions.
"""

from __future__ import annotations

import torch

from .rng import categorical


def accepts(p_d: torch.Tensor, q_d: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """``u <= p(d)/q(d)`` without dividing; a draft the target gives zero mass is never kept."""
    return (u * q_d <= p_d) & (p_d > 0)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``norm(max(p - q, 0))``. Its mass is zero only if p == q, where a rejection has probability
    zero; rounding can still get there, and then p itself is the right answer."""
    r = (p - q).clamp(min=0)
    mass = r.sum(-1, keepdim=True)
    return torch.where(mass > 0, r / mass.clamp(min=torch.finfo(r.dtype).tiny), p)


def couple(
    p: torch.Tensor, q: torch.Tensor, d: torch.Tensor, u_accept: torch.Tensor, u_sample: torch.Tensor
) -> torch.Tensor:
    """MRS(p, q, d) over whole rows at once: keep d where it passes, else draw from the residual."""
    p_d = p.gather(-1, d[..., None]).squeeze(-1)
    q_d = q.gather(-1, d[..., None]).squeeze(-1)
    keep = accepts(p_d, q_d, u_accept)
    return torch.where(keep, d, categorical(residual(p, q), u_sample))


def gather_rows(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x[b, idx[b, ...]] for x [B, N, ...] and idx [B, ...]."""
    flat = idx.reshape(idx.shape[0], -1)
    out = x.gather(1, flat.view(*flat.shape, *([1] * (x.dim() - 2))).expand(-1, -1, *x.shape[2:]))
    return out.view(*idx.shape, *x.shape[2:])
