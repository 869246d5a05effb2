"""Deliberately broken decoder parts: the lossy mistakes of DESIGN.md section 6. The exactness test
must reject every one of them."""

from __future__ import annotations

import torch

from jacobigen.drafters import Independent
from jacobigen.verifiers import FirstRejection


class ResidualFromTarget(FirstRejection):
    """Mutant 1: on rejection draw the replacement from p instead of the residual."""

    def residual(self, p, q):
        return p


class StaleQ(Independent):
    """Mutant 3: verify against the q of the previous iteration (off-by-one in the history)."""

    def draft(self, slots, draws):
        tokens, q = super().draft(slots, draws)
        return tokens, torch.where(slots.has_old[..., None], slots.old_q, q)


class ResidualUnlessUnitMass(FirstRejection):
    """Mutant 6: a "numerical safety" residual that falls back to p unless its mass is about 1."""

    def residual(self, p, q):
        r = (p - q).clamp(min=0)
        mass = r.sum(-1, keepdim=True)
        return torch.where((mass - 1).abs() < 1e-3, r / mass.clamp(min=1e-30), p)


class MinimumAcceptance(FirstRejection):
    """Mutant 7: always accept the first draft, so every iteration commits at least two tokens."""

    def accept(self, p_d, q_d, u):
        ok = super().accept(p_d, q_d, u)
        ok[:, :1] = True
        return ok
