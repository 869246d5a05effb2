"""Relaxed (lossy) verifiers that the seeds compare with: GSD and LANTERN (docs/DESIGN.md §4.5).

Both trade exactness for acceptance by letting a draft borrow probability from tokens whose VQ
latents are close to it. Neighbours come from the latents the decode is given (a VQ codebook, rows
aligned with the layout's image ids: ``ModelBundle.latents``) or, without them, from the model's
output embedding rows of the image ids. They are computed once per (latents or model, k) and
cached. Neither ever accepts a token outside the target's support (top-k/top-p truncation holds).
With no relaxation (k = 0, or LANTERN's delta = 0) both reduce to exact modified rejection sampling.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from ..core.checks import integer, number
from ..core.contract import model_device
from ..core.errors import ConfigError
from ..core.mrs import accepts, residual
from ..core.registry import register
from .verifiers import Verifier

MAX_NEIGHBOURS = 256  # a [span, k] column table per (model, k)
_NEIGHBOURS: weakref.WeakKeyDictionary[object, dict] = weakref.WeakKeyDictionary()


def _output_embeddings(model) -> torch.Tensor:
    for get in (lambda m: m.head.weight, lambda m: m.get_output_embeddings().weight):
        try:
            return get(model).detach().float()
        except AttributeError:
            continue
    raise ConfigError(
        "relaxed verifiers need token latents: pass `latents=` (VQ codebook rows for the "
        "image ids), or use a model with output embeddings"
    )


def latent_neighbours(
    model, image_ids: tuple[int, int], span: tuple[int, int], k: int, latents: torch.Tensor | None = None
) -> torch.Tensor:
    """[S, k]: for each column of the decode's tables (the ids of ``span``, S of them), the columns
    of its image id's k nearest latent neighbours (excluding itself); ids outside the image range
    are their own neighbours (they borrow nothing they did not have)."""
    per_model = _NEIGHBOURS.setdefault(model, {})
    key = (image_ids, span, k, None if latents is None else id(latents))
    owner, table = per_model.get(key, (None, None))
    if table is None or (owner is not None and owner() is not latents):  # an id reused by new latents
        lo, hi = image_ids
        lat = _output_embeddings(model) if latents is None else latents.detach().float()
        lat = lat[lo:hi] if lat.shape[0] >= hi else lat[: hi - lo]
        if lat.shape[0] != hi - lo:
            raise ConfigError(f"latent codebook has {lat.shape[0]} rows, image ids need {hi - lo}")
        k_eff = min(k, hi - lo - 1)
        dist = torch.cdist(lat, lat)
        dist.fill_diagonal_(float("inf"))
        first, last = span
        table = torch.arange(last - first)[:, None].repeat(1, k_eff)
        table[lo - first : hi - first] = dist.topk(k_eff, largest=False).indices + (lo - first)
        table = table.to(lat.device)
        per_model[key] = (None if latents is None else weakref.ref(latents), table)
    return table


class _Neighbourhood(Verifier):
    lossless = False
    k = 0

    def bind(self, model, layout, latents=None):
        super().bind(model, layout, latents)
        device = model_device(model)
        span = layout.id_span(model.vocab_size)
        self.nb = latent_neighbours(model, layout.image_ids, span, self.k, latents).to(device)

    def _mass(self, p: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        """Probability of d's neighbours (not d itself) under p; d holds table columns."""
        return p.gather(-1, self.nb[d]).sum(-1) if self.nb.shape[1] else torch.zeros_like(d, dtype=p.dtype)


@register("gsd", "verifier", "GSD: accept by the mass of the draft's group of latent neighbours", prefix="gsd_")
@dataclass(eq=False)
class GroupVerifier(_Neighbourhood):
    """GSD: accept d if u <= p(G) / q(G) over the group G = {d} and its k nearest latent neighbours."""

    k: int = 4

    def __post_init__(self):
        self.k = integer("gsd_k", self.k, 0, MAX_NEIGHBOURS)

    def accept(self, p, q, d, u):
        p_d = p.gather(-1, d[..., None]).squeeze(-1)
        q_g = q.gather(-1, d[..., None]).squeeze(-1) + self._mass(q, d)
        return accepts(p_d + self._mass(p, d), q_g, u) & (p_d > 0)


@register("lantern", "verifier", "LANTERN: a draft borrows up to delta from its latent neighbours", prefix="lantern_")
@dataclass(eq=False)
class LanternVerifier(_Neighbourhood):
    """LANTERN: p~(d) = p(d) + min(p(k nearest latent neighbours of d), delta); accept if
    u <= p~(d)/q(d). On rejection d and its neighbours leave the residual (their mass was offered)."""

    k: int = 8
    delta: float = 0.1

    def __post_init__(self):
        self.k = integer("lantern_k", self.k, 0, MAX_NEIGHBOURS)
        self.delta = number("lantern_delta", self.delta, 0, 1)

    def accept(self, p, q, d, u):
        p_d = p.gather(-1, d[..., None]).squeeze(-1)
        relaxed = p_d + self._mass(p, d).clamp(max=self.delta)
        return accepts(torch.where(p_d > 0, relaxed, p_d), q.gather(-1, d[..., None]).squeeze(-1), u)

    def residual(self, p, q, d):
        r = (p - q).clamp(min=0)
        if self.delta > 0 and self.nb.shape[1]:
            r = r.scatter(-1, self.nb[d], 0.0).scatter(-1, d[..., None], 0.0)
        mass = r.sum(-1, keepdim=True)
        return torch.where(mass > 0, r / mass.clamp(min=torch.finfo(r.dtype).tiny), residual(p, q))
