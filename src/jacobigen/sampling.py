"""The one sampling pipeline, logits -> target distribution p, shared by AR and every Jacobi decoder.

Lossless means "same distribution as AR with the same pipeline", so there is exactly one pipeline.
Order: CFG combine, allowed-id mask, temperature, top-k, top-p, forced structural tokens. The
allowed mask comes before top-k/top-p so that truncation can never leave an empty support.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .errors import ConfigError


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    cfg: float = 1.0

    def __post_init__(self):
        if not (isinstance(self.temperature, (int, float)) and self.temperature > 0
                and math.isfinite(self.temperature)):
            raise ConfigError(f"temperature must be a finite number > 0 (use top_k=1 for greedy), "
                              f"got {self.temperature}")
        if self.top_k is not None and (not isinstance(self.top_k, int) or self.top_k < 1):
            raise ConfigError(f"top_k must be an integer >= 1 or None, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must lie in (0, 1], got {self.top_p}")
        if not math.isfinite(self.cfg):
            raise ConfigError(f"cfg scale must be finite, got {self.cfg}")

    @property
    def guided(self) -> bool:
        """CFG needs an unconditional row per sequence unless the scale is exactly 1."""
        return self.cfg != 1.0


def target_probs(logits: torch.Tensor, sampling: SamplingConfig, allowed: torch.Tensor,
                 forced: torch.Tensor) -> torch.Tensor:
    """Turn model logits into target distributions.

    logits: [R, T, V], rows interleaved (cond, uncond) per sequence when guided.
    allowed: [V] bool. forced: [B, T] token id or -1. Returns float32 probabilities [B, T, V].
    """
    logits = logits.float()
    if sampling.guided:
        cond, uncond = logits[0::2], logits[1::2]
        logits = uncond + sampling.cfg * (cond - uncond)
    logits = logits.masked_fill(~allowed, float("-inf")) / sampling.temperature
    if sampling.top_k is not None and sampling.top_k < logits.shape[-1]:
        keep = torch.zeros_like(logits, dtype=torch.bool)
        keep.scatter_(-1, logits.topk(sampling.top_k, dim=-1).indices, True)
        logits = logits.masked_fill(~keep, float("-inf"))
    probs = logits.softmax(-1)
    if sampling.top_p is not None and sampling.top_p < 1:
        sorted_p, order = probs.sort(-1, descending=True)
        before = sorted_p.cumsum(-1) - sorted_p
        drop = torch.zeros_like(probs, dtype=torch.bool).scatter_(-1, order, before >= sampling.top_p)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    is_forced = forced >= 0
    if is_forced.any():
        onehot = torch.nn.functional.one_hot(forced.clamp(min=0), probs.shape[-1]).to(probs.dtype)
        probs = torch.where(is_forced[..., None], onehot, probs)
    return probs
