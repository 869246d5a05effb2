"""A static, ragged KV cache: each row owns a length, a block of new tokens lands right after it.

Jacobi decoding writes a whole window, then keeps only what verification committed. Rows advance by
different amounts (CFG pairs share tokens but not prefix lengths; batched sequences accept different
run lengths), trees keep one root-to-leaf path, and 2-D layouts keep scattered tokens. All of that is
one operation here: ``commit(keep, counts)`` moves the chosen entries of the last block, in order,
to the end of each row's committed region.
"""

from __future__ import annotations

import torch

# cache slots per row come in steps of this many, so that prompts of similar lengths share the
# shapes of every tensor the step sees (a compiled step compiles once for all of them)
CAPACITY_STEP = 64


def cache_slots(prefix: int, length: int, slack: int) -> int:
    """Cache slots per row for a ``prefix`` of prompt tokens (header included), an image of
    ``length`` tokens and ``slack`` slots past it that a block may write into. Attention reads every
    slot (masked or not), so a forward's cost follows this, not only the tokens before it."""
    return -(-(prefix + length + slack) // CAPACITY_STEP) * CAPACITY_STEP


class KVCache:
    STATE = ("keys", "values", "lengths", "_index", "_rows")  # what a step reads and replaces (decode.replay)

    def __init__(
        self,
        n_layers: int,
        rows: int,
        heads: int,
        capacity: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ):
        shape = (rows, heads, capacity, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.lengths = torch.zeros(rows, dtype=torch.int64, device=device)
        self.capacity = capacity
        self._index: torch.Tensor | None = None
        self._rows: torch.Tensor | None = None

    @property
    def rows(self) -> int:
        return self.lengths.shape[0]

    def slots(self, block: int) -> torch.Tensor:
        """Cache slots [rows, block] that a block of this size will occupy. No host sync: the
        decoders size the cache for the longest sequence, and an overflowing index makes the
        write in :meth:`update` fail rather than land out of place."""
        return self.lengths[:, None] + torch.arange(block, device=self.lengths.device)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write a block's keys/values [rows, heads, T, dim] after each row's length; return all slots.
        Layer 0 computes the slot index that the other layers of the same forward reuse."""
        if layer == 0 or self._index is None or self._index.shape[1] != k.shape[2]:
            self._index = self.slots(k.shape[2])
            self._rows = torch.arange(self.rows, device=self._index.device)[:, None]
        # an index_put_ (not a scatter_): compiled, it stays a write into the buffer instead of a
        # copy of the whole cache per layer
        self.keys[layer][self._rows, :, self._index] = k.transpose(1, 2).to(self.keys[layer].dtype)
        self.values[layer][self._rows, :, self._index] = v.transpose(1, 2).to(self.values[layer].dtype)
        return self.keys[layer], self.values[layer]

    def assign(self, rows: torch.Tensor, other: KVCache) -> None:
        """Rows ``rows`` take over ``other``'s rows (same capacity): a new sequence joins the batch."""
        for mine, theirs in zip((*self.keys, *self.values), (*other.keys, *other.values), strict=True):
            mine[rows] = theirs
        self.lengths[rows] = other.lengths

    def select(self, rows: torch.Tensor) -> None:
        """Keep only rows ``rows`` (indices), in that order."""
        self.keys = [k[rows] for k in self.keys]
        self.values = [v[rows] for v in self.values]
        self.lengths = self.lengths[rows]

    def commit(self, keep: torch.Tensor | None, counts: torch.Tensor) -> None:
        """Keep ``keep[r, :counts[r]]`` (indices into the last block, increasing) for each row;
        entries past ``keep``'s width, and all of them when ``keep=None``, are already in place."""
        counts = counts.to(self.lengths.device)
        if keep is not None and keep.shape[1]:
            keep = keep.to(self.lengths.device)
            src, dst = self.lengths[:, None] + keep, self.slots(keep.shape[1])
            rows = torch.arange(self.rows, device=src.device)[:, None]
            for buf in (*self.keys, *self.values):
                buf[rows, :, dst] = buf[rows, :, src]
        self.lengths = self.lengths + counts


class CacheRows(KVCache):
    """Rows ``start:stop`` of a cache as a cache of their own, sharing its buffers: a forward of
    those rows alone writes in place. (The decoder commits on the whole cache, never on this.)"""

    def __init__(self, cache: KVCache, start: int, stop: int):
        self.keys = [k[start:stop] for k in cache.keys]
        self.values = [v[start:stop] for v in cache.values]
        self.lengths = cache.lengths[start:stop]
        self.capacity = cache.capacity
        self._index: torch.Tensor | None = None
        self._rows: torch.Tensor | None = None
