"""The 1-D chain schedule: a window of drafts after the last committed token, optionally headed by
SJD-PAC's proactive tree (DESIGN.md sections 3 and 4.2). Plain AR is the chain with no drafts.

Slot i of the next window holds position n + i. Its belief is the stale target the last forward
gave that position along the spine (or the layout's prior if it was not in the block), and the
draft that sat there before, with its q, is what a coupling drafter may keep. The block is
``[last committed, tree nodes, chain drafts]`` with the static tree-causal structure; the one chain
is verified exactly; the accepted path and the sampled token are committed.
"""

from __future__ import annotations

import functools

import torch

from .drafters import Slots
from .engine import Block, Flight, Segments, per_model_row
from .masks import BandMask
from .mrs import gather_rows
from .tree import WindowShape
from .verifiers import Window


class Chain:
    def __init__(self, layout, window: int, tree, targets, device):
        w = window - 1
        self.shape = WindowShape(w, min(tree.depth, w) if tree else 0, tree.width if tree else 1)
        self.length, self.targets, self.device = layout.length, targets, device
        self.arange_w = torch.arange(w, device=device)
        self.depths = torch.arange(w + 1, device=device)
        self.spine = self.shape.spine().to(device)
        self.node_depth = self.shape.node_depth().to(device)
        self.structure = self.shape.structure(device)
        self.band: BandMask | None = None

    @property
    def board_width(self) -> int:
        return self.length + self.shape.drafts + 1

    @property
    def slot_count(self) -> int:
        return self.shape.drafts

    @property
    def block_slack(self) -> int:
        """Cache slots past the image that a block may write into."""
        return self.shape.size

    def start(self, rows: int, vocab: int, cache) -> None:
        w, dev = self.shape.drafts, self.device
        self.band = BandMask(self.structure, cache.capacity)
        self.p = torch.zeros(rows, w + 1, vocab, device=dev)        # spine targets of the last forward
        self.tokens = torch.zeros(rows, w, dtype=torch.int64, device=dev)
        self.q = torch.zeros(rows, w, vocab, device=dev)
        self.step = torch.zeros(rows, dtype=torch.int64, device=dev)
        k = self.targets.support_size                       # top-k ids of those targets
        self.support = None if k is None else torch.zeros(rows, w + 1, k, dtype=torch.int64, device=dev)

    def admit(self, fl: Flight, rows: torch.Tensor, first: torch.Tensor, cache) -> None:
        fl.board[rows] = 0
        fl.board[rows, 0] = first

    def select(self, rows: torch.Tensor) -> None:
        self.p, self.tokens, self.q, self.step = self.p[rows], self.tokens[rows], self.q[rows], self.step[rows]
        if self.support is not None:
            self.support = self.support[rows]

    # --- the step's parts -------------------------------------------------------------------

    def slots(self, fl: Flight) -> Slots:
        w, n = self.shape.drafts, fl.committed
        if not w:                                   # plain AR: no window
            return self._no_slots(n.shape[0])
        positions = n[:, None] + self.arange_w
        j = self.arange_w + self.step[:, None]       # where each slot's position sat in the last block
        live = fl.live[:, None]
        has_p = (j <= w) & live
        belief = torch.where(has_p[..., None], gather_rows(self.p, j.clamp(max=w)), self.targets.prior(positions))
        jo = j.clamp(max=w - 1)
        support = None if self.support is None else gather_rows(self.support, j.clamp(max=w))
        return Slots(positions, belief, has_p, self.tokens.gather(1, jo), gather_rows(self.q, jo), (j < w) & live,
                     support)

    @functools.lru_cache(maxsize=8)
    def _no_slots(self, b: int) -> Slots:
        empty = torch.zeros(b, 0, dtype=torch.int64, device=self.device)
        q = torch.zeros(b, 0, self.q.shape[-1], device=self.device)
        return Slots(empty, q, empty.bool(), empty, q, empty.bool())

    @functools.lru_cache(maxsize=8)
    def _no_tree(self, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        none = torch.zeros(b, 0, 1, dtype=torch.int64, device=self.device)
        return none, none.bool()

    def segments(self, fl: Flight, slots: Slots, tokens: torch.Tensor, q: torch.Tensor) -> Segments:
        self.tokens, self.q = tokens, q
        return Segments(Window(tokens, q, *self._no_tree(tokens.shape[0])), self.shape, slots.positions)

    def block(self, fl: Flight, seg: Segments, cache) -> Block:
        n, w = fl.committed, self.shape.drafts
        last = (n - 1).clamp(min=0)[:, None]
        root = fl.board.gather(1, last)
        tokens = torch.cat([root, seg.window.tokens], 1) if not self.shape.tree else \
            self.shape.block_tokens(root[:, 0], seg.window.tokens, seg.window.cand)
        m = (self.length - 1 - n).clamp(0, w) if w else None      # no drafts: nothing to verify
        return Block(tokens, last + self.node_depth, self.band(cache.lengths), m, n[:, None] + self.depths)

    def commit(self, fl: Flight, seg: Segments, block: Block, p, support, k, nxt, path, cache) -> torch.Tensor:
        n = fl.committed
        active = n < self.length
        k = torch.where(active, k, 0)
        # the accepted path and the sampled token; entries past the path land where later commits
        # overwrite them, finished rows write into slack
        if self.shape.drafts:
            accepted = block.tokens.gather(1, path[:, 1:]) if self.shape.tree else block.tokens[:, 1:]
            fl.board.scatter_(1, n[:, None] + self.arange_w, accepted)
        fl.board.scatter_(1, (n + k)[:, None], nxt[:, None])
        self.step = (k + 1) * active
        group = cache.rows // n.shape[0]
        # a chain keeps a prefix of its block, already in place; a tree's path is moved there
        keep = per_model_row(path, group) if self.shape.tree else None
        cache.commit(keep, per_model_row(self.step, group))
        self.p = p if not self.shape.tree else p[:, self.spine]
        self.support = support if support is None or not self.shape.tree else support[:, self.spine]
        return self.step
