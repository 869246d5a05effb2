"""Additive float attention masks over a ragged KV cache (never boolean: docs/DESIGN.md §5.2)."""

from __future__ import annotations

import torch


def block_mask(
    lengths: torch.Tensor, capacity: int, structure: torch.Tensor, cached: torch.Tensor | None = None
) -> torch.Tensor:
    """Mask [R, 1, T, C] for a block of T new tokens written right after each row's cached length.

    Every cached slot below ``lengths[r]`` is visible (committed tokens), or, when ``cached``
    ([R, T, C] bool) is given, only those it marks for each query; within the block, query
    ``t`` sees block entry ``t'`` iff ``structure[..., t, t']`` ([T, T] or [R, T, T], bool).
    """
    t = structure.shape[-1]
    slots = torch.arange(capacity, device=lengths.device)
    rel = slots[None, :] - lengths[:, None]  # [R, C] slot index within the block
    committed = (rel < 0)[:, None, :]  # [R, 1, C]
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


class BandMask:
    """:func:`block_mask` for a fixed block structure, as one gather per forward.

    Row r's mask is a window of one precomputed band: visible before the row's length, the block
    structure right after it, nothing beyond. ``band[x]`` is the mask of a row whose length is
    ``capacity - x``, so a forward costs one index into a [capacity + T + 1, T, capacity] view.
    """

    def __init__(self, structure: torch.Tensor, capacity: int):
        t, dev = structure.shape[-1], structure.device
        band = torch.full((t, 2 * capacity + t), float("-inf"), device=dev)
        band[:, :capacity] = 0.0
        band[:, capacity : capacity + t] = torch.where(structure, 0.0, float("-inf"))
        self.capacity = capacity
        self.windows = band.unfold(1, capacity, 1).permute(1, 0, 2)

    def __call__(self, lengths: torch.Tensor) -> torch.Tensor:
        return self.windows.index_select(0, self.capacity - lengths).unsqueeze(1)


def row_causal_mask(anchor_pos, shared, node_ok, slot_pos, within: torch.Tensor | None = None):
    """The row-causal attention of one block, per cache row.

    anchor_pos, shared [R, A]; node_ok [R, A, T1] (segment a's nodes); slot_pos [R, C] raster
    position of each committed cache slot (-1 for the prompt); ``within`` [R, A, T1, T1]: which
    nodes of each segment see which (its tree-causal structure; default causal). Returns the block
    structure [R, N, N] and the visible cache slots [R, N, C] (N = A * T1) for :func:`masks.block_mask`.
    """
    r, a, t1 = node_ok.shape
    dev = node_ok.device
    seg = torch.arange(a, device=dev).repeat_interleave(t1)
    idx = torch.arange(t1, device=dev).repeat(a)
    ok = node_ok.reshape(r, a * t1)
    apos = anchor_pos.repeat_interleave(t1, 1)
    sees = (idx[None, :] <= idx[:, None]) if within is None else within[:, seg[:, None], idx[:, None], idx[None, :]]
    own = (seg[:, None] == seg[None, :]) & sees & ok[:, :, None] & ok[:, None, :]
    tail = (idx == 0)[None] & shared.repeat_interleave(t1, 1) & ok
    lower = apos[:, None, :] < apos[:, :, None]
    structure = own | (tail[:, None, :] & lower & ok[:, :, None])
    structure |= torch.eye(a * t1, dtype=torch.bool, device=dev)
    cached = (slot_pos[:, None, :] < apos[:, :, None]) & ok[:, :, None]
    return structure, cached
