"""Counter-based randomness: every draw is a pure function of named integer keys.

A decoder never holds generator state. A uniform is ``uniform(seed, sequence, position, iteration,
stream)``, so a sequence gets the same tokens whether it runs alone or in a batch, and SCD's Gumbel
sharing can reuse one position's noise across iterations without storing an [L, V] table.

The hash is a 32-bit integer finaliser (``lowbias32``) chained over the keys, evaluated in int64
with multiplications split so that no intermediate overflows.
"""

from __future__ import annotations

import torch

_MASK32 = 0xFFFFFFFF


class Stream:
    """Stream ids keep independent draws at the same (position, iteration) apart."""

    ACCEPT = 1
    SAMPLE = 2
    DRAFT = 3
    COUPLE = 4
    GUMBEL = 5
    TREE = 6


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    # (x * c) mod 2**32 with products kept below 2**48.
    lo = x & 0xFFFF
    hi = x >> 16
    return ((hi * c & 0xFFFF) << 16) + lo * c & _MASK32


def _mix(x: torch.Tensor) -> torch.Tensor:
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def hash_keys(*keys: torch.Tensor | int) -> torch.Tensor:
    """Broadcast the keys together and hash them into uint32 values held in int64."""
    h = torch.as_tensor(0x9E3779B9, dtype=torch.int64)
    for k in keys:
        k = torch.as_tensor(k, dtype=torch.int64)
        h = _mix((h ^ (k & _MASK32)) + 0x632BE5AB & _MASK32)
    return h


def uniform(*keys: torch.Tensor | int) -> torch.Tensor:
    """Float64 uniforms strictly inside (0, 1), one per broadcast key."""
    return (hash_keys(*keys).to(torch.float64) + 0.5) / 2.0**32


def gumbel(*keys: torch.Tensor | int) -> torch.Tensor:
    return -torch.log(-torch.log(uniform(*keys)))


def categorical(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sample of each row of ``probs`` [..., V] with uniforms ``u`` [...].

    Zero-probability ids are never returned, also when rounding pushes ``u`` past the last bin.
    """
    cdf = probs.to(torch.float64).cumsum(-1)
    target = (u * cdf[..., -1]).unsqueeze(-1)
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    last = probs.shape[-1] - 1 - (probs.flip(-1) > 0).to(torch.int64).argmax(-1)
    return torch.minimum(idx, last)
