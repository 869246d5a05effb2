"""The one sampling pipeline, logits -> target distribution p, shared by AR and every Jacobi decoder.

Lossless means "same distribution as AR with the same pipeline", so there is exactly one pipeline.
Order: CFG combine, allowed-id mask, temperature, top-k, top-p, forced structural tokens. The
allowed mask comes before top-k/top-p so that truncation can never leave an empty support.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .checks import integer, number
from .kernels import cumsum

# temperature and top-p act within float32's normal range: below it one would round to 0 (greedy
# either way), above it to inf (uniform either way), and either would turn a probability into NaN
_TINY, _HUGE = torch.finfo(torch.float32).tiny, torch.finfo(torch.float32).max


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    cfg: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "temperature", number("temperature", self.temperature, 0, lo_open=True))
        if self.top_k is not None:
            object.__setattr__(self, "top_k", integer("top_k", self.top_k, 1))
        if self.top_p is not None:
            object.__setattr__(self, "top_p", number("top_p", self.top_p, 0, 1, lo_open=True))
        object.__setattr__(self, "cfg", number("cfg scale", self.cfg))

    @property
    def guided(self) -> bool:
        """CFG needs an unconditional row per sequence unless the scale is exactly 1."""
        return self.cfg != 1.0


def target_probs(
    logits: torch.Tensor,
    sampling: SamplingConfig,
    allowed: torch.Tensor,
    blocked: torch.Tensor | None = None,
    with_top: bool = False,
):
    """Turn model logits into target distributions of free positions.

    logits: [R, T, V], rows interleaved (cond, uncond) per sequence when guided; allowed: [V]
    bool (``blocked``, its negation, may be passed precomputed). Returns float32 probabilities [B, T, V]
    (and, ``with_top``, the top-k ids [B, T, k] or None). With top-k the softmax runs on the k-slice only
    (top-p then sees the dense vector). Forced positions are :class:`TargetPipeline`'s business.
    """
    logits = logits.float()
    if sampling.guided:
        cond, uncond = logits.unflatten(0, (-1, 2)).unbind(1)
        logits = uncond + sampling.cfg * (cond - uncond)
    # total for any finite setting: a huge cfg overflows to +-inf (or NaN), which would make the
    # softmax NaN and the sampler return an id outside the vocabulary; clamp to finite, block the
    # disallowed ids, and divide by the temperature only after the row's maximum is 0, so that
    # the largest allowed logit stays at 0 (probability > 0) however small the temperature
    big = torch.finfo(logits.dtype).max
    logits = logits.nan_to_num(-big, big, -big)
    logits = logits.masked_fill(~allowed if blocked is None else blocked, float("-inf"))
    if sampling.temperature != 1:
        logits = (logits - logits.amax(-1, keepdim=True)) / min(max(sampling.temperature, _TINY), _HUGE)
    ids = None
    if sampling.top_k is not None and sampling.top_k < logits.shape[-1]:
        top = logits.topk(sampling.top_k, dim=-1, sorted=False)
        ids = top.indices
        probs = torch.zeros_like(logits).scatter_(-1, ids, top.values.softmax(-1))
    else:
        probs = logits.softmax(-1)
    if sampling.top_p is not None and sampling.top_p < 1:
        sorted_p, order = probs.sort(-1, descending=True)
        before = cumsum(sorted_p) - sorted_p
        drop = torch.zeros_like(probs, dtype=torch.bool).scatter_(-1, order, before >= max(sampling.top_p, _TINY))
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return (probs, ids) if with_top else probs


class TargetPipeline:
    """:func:`target_probs` for one layout, with its forced structural tokens: a position's *kind*
    (0: free, i: the i-th structural id) indexes small tables, so forced positions cost no branch
    and no host sync, and the layout's prior comes from the same tables.

    Its distributions are [..., ``width``] over the layout's id span [lo, hi) (``width`` = hi - lo),
    not the whole vocabulary: no image or structural id lies outside it, and every table a decoder
    keeps per slot (drafts, the VP history, residuals) is that wide, so a step's bookkeeping is
    5.3x smaller on the embedded model (1,027 of 5,422 ids) and 7.4x on Lumina-mGPT (8,800 of
    65,536), and image ids at the top of a large vocabulary (Janus, Emu3, Lumina-mGPT 2.0) cost
    no more columns than there are ids in the span. Column i is id lo + i
    (:meth:`jacobigen.core.draws.Draws.local`); tokens keep the model's numbers."""

    def __init__(self, sampling: SamplingConfig, layout, vocab_size: int, device=None):
        self.sampling = sampling
        self.allowed = layout.allowed(vocab_size, device)
        self.forced = layout.forced(device)
        ids = sorted(set(self.forced[self.forced >= 0].tolist()))
        lo, hi = self.span = layout.id_span(vocab_size)  # the tables' ids
        self.width = hi - lo
        self.inside = self.allowed[lo:hi]  # the span's allowed ids, and the others
        self.blocked = ~self.inside
        k = sampling.top_k
        self.support_size = k if k is not None and k < hi - lo else None  # ids in with_support's support
        kind = torch.zeros(layout.length + 1, dtype=torch.int64, device=device)  # past the end: free
        self.columns = torch.tensor([0, *(t - lo for t in ids)], device=device)  # each kind's structural id's column
        self.onehot = torch.zeros(1 + len(ids), self.width, device=device)
        for i, tok in enumerate(ids):
            self.onehot[1 + i, tok - lo] = 1.0
            kind[:-1][self.forced == tok] = 1 + i
        self.kind, self.length = kind, layout.length
        self.prior_table = self.onehot.clone()
        self.prior_table[0] = self.inside.float() / self.allowed.sum()

    def prior(self, gen_positions: torch.Tensor) -> torch.Tensor:
        """Draft distribution [..., width] of a position never evaluated: uniform over the image ids,
        one-hot where the layout forces a token."""
        return self.prior_table[self.kind[gen_positions.clamp(0, self.length)]]

    def __call__(self, logits: torch.Tensor, gen_positions: torch.Tensor) -> torch.Tensor:
        """logits [R, T, V]; gen_positions [B, T]: generated position of the token each predicts."""
        return self.with_support(logits, gen_positions)[0]

    def with_support(self, logits: torch.Tensor, gen_positions: torch.Tensor):
        """(p, support): ``support`` [B, T, k] holds the columns outside which p is zero (the top-k
        ids', the forced id's where forced), or is None without top-k."""
        # a step runs this once per forward: table lookups as embeddings and views, not indexing
        kind = torch.take(self.kind, gen_positions.clamp(0, self.length))
        lo, hi = self.span
        span = logits.narrow(-1, lo, hi - lo)
        probs, top = target_probs(span, self.sampling, self.inside, self.blocked, with_top=True)
        forced = (kind > 0).unsqueeze(-1)
        probs = torch.where(forced, F.embedding(kind, self.onehot), probs)
        if top is not None:
            top = torch.where(forced, F.embedding(kind, self.columns.unsqueeze(-1)), top)
        return probs, top
