"""Additive float attention masks over a ragged KV cache (never boolean: DESIGN.md section 5)."""

from __future__ import annotations

import torch


def block_mask(lengths: torch.Tensor, capacity: int, structure: torch.Tensor,
               cached: torch.Tensor | None = None) -> torch.Tensor:
    """Mask [R, 1, T, C] for a block of T new tokens written right after each row's cached length.

    Every cached slot below ``lengths[r]`` is visible (committed tokens), or, when ``cached``
    ([R, T, C] bool) is given, only those it marks for each query; within the block, query
    ``t`` sees block entry ``t'`` iff ``structure[..., t, t']`` ([T, T] or [R, T, T], bool).
    """
    t = structure.shape[-1]
    slots = torch.arange(capacity, device=lengths.device)
    rel = slots[None, :] - lengths[:, None]                       # [R, C] slot index within the block
    committed = (rel < 0)[:, None, :]                             # [R, 1, C]
    in_block = (rel >= 0) & (rel < t)
    structure = structure.expand(lengths.shape[0], t, t)
    block_vis = structure.gather(2, rel.clamp(0, t - 1)[:, None, :].expand(-1, t, -1)) & in_block[:, None, :]
    if cached is not None:
        committed = committed & cached
    visible = committed | block_vis
    zero = torch.zeros((), dtype=torch.float32, device=lengths.device)
    return torch.where(visible, zero, float("-inf"))[:, None]


def causal(t: int, device=None) -> torch.Tensor:
    return torch.ones(t, t, dtype=torch.bool, device=device).tril()


def prefix_structure(lengths: torch.Tensor, t: int) -> torch.Tensor:
    """Causal structure [R, T, T] for right-padded prefixes: no query sees padding but its own."""
    idx = torch.arange(t, device=lengths.device)
    real = idx[None, :] < lengths[:, None]
    struct = causal(t, lengths.device)[None] & real[:, None, :]
    return struct | torch.eye(t, dtype=torch.bool, device=lengths.device)
