"""Counter-based randomness: every draw is a pure function of named integer keys.

A decoder never holds generator state. A uniform is ``uniform(stream, seed, position, iteration)``,
so a sequence gets the same tokens whether it runs alone or in a batch, and SCD's Gumbel sharing
can reuse one position's noise across iterations without storing an [L, V] table.

The hash is a 32-bit integer finaliser (``lowbias32``) chained over the keys, evaluated in int64
(products wrap mod 2**64; only their low 32 bits are kept). Keys are 32-bit: callers keep seeds in
[0, 2**32) (``api.generate`` checks). Every draw first hashes a *domain word* made of its stream,
the number of keys after it and its kind (uniform or Gumbel), so draws of different streams or
shapes never share a uniform: without it the ACCEPT uniform of iteration 5 equalled the shared
Gumbel noise of token 1 (both hashed (seed, position, 5, 1)), which correlated a draft with the
test that judged it.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .kernels import cumsum
from .recording import recording

_MASK32 = 0xFFFFFFFF


class Stream:
    """Stream ids keep independent draws at the same (position, iteration) apart (below
    ``2**26``: the domain word packs stream, arity and kind into 32 bits)."""

    ACCEPT = 1
    SAMPLE = 2
    DRAFT = 3
    COUPLE = 4
    GUMBEL = 5
    TREE = 6
    MIX = 7


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    # (x * c) mod 2**32: the int64 product wraps mod 2**64, whose low 32 bits are exact.
    return x * c & _MASK32


def _mix(x: torch.Tensor) -> torch.Tensor:
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


MAX_KEYS = 15  # keys after the domain word
_UNIFORM, _GUMBEL = 0, 1


def hash_keys(*keys: torch.Tensor | int) -> torch.Tensor:
    """Broadcast the keys together and hash them into uint32 values held in int64."""
    size = _host_size(keys)
    if size == 1:
        return torch.tensor(_hash_ints(keys), dtype=torch.int64).view([1] * _rank(keys))
    return torch.from_numpy(_hash_numpy(keys).view(np.int64)) if size is not None else _hash_torch(keys)


def _domain(stream: torch.Tensor | int, keys: tuple, kind: int) -> tuple:
    """The keys behind their domain word (stream, arity, kind): the first thing hashed, so two
    draws that differ in any of the three never reuse each other's uniforms."""
    if len(keys) > MAX_KEYS:
        raise ValueError(f"at most {MAX_KEYS} keys per draw, got {len(keys)}")
    return ((stream * (MAX_KEYS + 1) + len(keys)) * 2 + kind, *keys)


def _unit(keys: tuple) -> torch.Tensor:
    """Float64 uniforms strictly inside (0, 1), one per broadcast key."""
    size = _host_size(keys)
    if size == 1:  # one sequence's single draw (plain AR): Python integers, no array at all
        return torch.tensor((_hash_ints(keys) + 0.5) / 2.0**32, dtype=torch.float64).view([1] * _rank(keys))
    if size is not None:
        return torch.from_numpy(np.asarray((_hash_numpy(keys) + 0.5) / 2.0**32))
    return (_hash_torch(keys).to(torch.float64) + 0.5) / 2.0**32


def uniform(stream: torch.Tensor | int, *keys: torch.Tensor | int) -> torch.Tensor:
    """Float64 uniforms strictly inside (0, 1) of ``stream``, one per broadcast key."""
    return _unit(_domain(stream, keys, _UNIFORM))


# An iteration draws a few small sets of uniforms (one per draft, per row): on a CPU each torch op
# costs microseconds of dispatch, so while the broadcast keys stay below this size the hash runs
# in NumPy (uint64 arithmetic wraps like the int64 path: the same values, tested). A large draw
# (noise over the vocabulary) hashes its small leading keys there, then its last keys in torch.
_SMALL = 4096


def _host_size(keys) -> int | None:
    """Elements of the keys' broadcast shape (the keys broadcast by contract) when a host-side hash
    may take them: CPU tensors of at most ``_SMALL`` elements, outside a compiled graph (which
    traces torch only); None otherwise."""
    if recording():
        return None
    dims: list[int] = []
    for k in keys:
        if isinstance(k, torch.Tensor):
            if k.device.type != "cpu":
                return None
            shape = k.shape
            if len(shape) > len(dims):
                dims[:0] = [1] * (len(shape) - len(dims))
            for i, d in enumerate(shape, len(dims) - len(shape)):
                if d != 1:
                    dims[i] = d
    size = math.prod(dims)
    return size if size <= _SMALL else None


def _rank(keys) -> int:
    return max((k.dim() for k in keys if isinstance(k, torch.Tensor)), default=0)


def _hash_torch(keys) -> torch.Tensor:
    cut = 0
    if not recording() and all(k.device.type == "cpu" for k in keys if isinstance(k, torch.Tensor)):
        while cut < len(keys) and _host_size(keys[: cut + 1]) is not None:
            cut += 1
    h = (
        torch.from_numpy(_hash_numpy(keys[:cut]).view(np.int64))
        if cut
        else torch.as_tensor(0x9E3779B9, dtype=torch.int64)
    )
    for k in keys[cut:]:
        k = torch.as_tensor(k, dtype=torch.int64)
        h = _mix((h ^ (k & _MASK32)) + 0x632BE5AB & _MASK32)
    return h


def _hash_ints(keys) -> int:
    """The hash of keys of one element each, in Python integers (the same values as the array paths)."""
    h = 0x9E3779B9
    for k in keys:
        h = _mix_int((h ^ (int(k) & _MASK32)) + 0x632BE5AB & _MASK32)
    return h


def _mix_int(x: int) -> int:
    x ^= x >> 16
    x = x * 0x7FEB352D & _MASK32
    x ^= x >> 15
    x = x * 0x846CA68B & _MASK32
    return x ^ (x >> 16)


def _hash_numpy(keys) -> np.ndarray:
    m = np.uint64(_MASK32)
    h = np.array(0x9E3779B9, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in keys:
            k = k.numpy().view(np.uint64) if torch.is_tensor(k) else np.uint64(k & _MASK32)
            h = (h ^ (k & m)) + np.uint64(0x632BE5AB) & m
            h = h ^ (h >> np.uint64(16))
            h = h * np.uint64(0x7FEB352D) & m
            h = h ^ (h >> np.uint64(15))
            h = h * np.uint64(0x846CA68B) & m
            h = h ^ (h >> np.uint64(16))
    return np.asarray(h)


def gumbel(stream: torch.Tensor | int, *keys: torch.Tensor | int) -> torch.Tensor:
    """Standard Gumbel noise of ``stream``, one per broadcast key (apart from its uniforms)."""
    return -torch.log(-torch.log(_unit(_domain(stream, keys, _GUMBEL))))


def categorical(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sample of each row of ``probs`` [..., V] with uniforms ``u`` [...].

    Zero-probability ids are never returned: the target stays strictly below the total mass, also
    when rounding would push ``u * total`` onto it, so the first bin above it has mass.
    """
    cdf = cumsum(probs.to(torch.float64))
    total = cdf[..., -1:]
    target = torch.minimum(u.unsqueeze(-1) * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, target, right=True).squeeze(-1)
