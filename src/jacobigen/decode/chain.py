"""The 1-D chain schedule: a window of drafts after the last committed token, optionally with
SJD-PAC's proactive tree carved out of it (docs/DESIGN.md §3 and §4.2). Plain AR is the chain
with no drafts.

Slot i of the next window holds position n + i. Its belief is the stale target the last forward
gave that position along the spine (or the layout's prior if it was not in the block), and the
draft that sat there before, with its q, is what a coupling drafter may keep. The block is
``[last committed, spine drafts, tree nodes]``, ``window`` tokens in all (:mod:`.tree`); the one
chain is verified exactly; the accepted path and the sampled token are committed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.masks import BandMask, block_mask, causal
from ..core.mrs import gather_rows
from ..core.recording import recording
from ..parts.drafters import Slots, earlier
from ..parts.tree import AutoBudget, TreeBlock, arrange, rank_candidates, select, universe
from ..parts.verifiers import Window
from .engine import Commit, Flight, ForwardBlock, Segments, per_model_row


@dataclass
class ChainBlock(ForwardBlock):
    """The chain's block: with its tree's value per row (None: a plain chain)."""

    tree_value: torch.Tensor | None = None


class Chain:
    # what a step reads and replaces, and what the batch replaces between steps (decode.replay)
    STATE = ("p", "q", "tokens", "step", "spine", "support", "no_slots", "no_tree", "auto")

    def __init__(self, layout, window: int, tree, targets, device):
        w = self.drafts = window - 1
        self.size, self.length, self.targets, self.device = window, layout.length, targets, device
        self.repeat = layout.repeat_offset  # the copy drafter's source: one frame, or one row, back
        self.tree = tree
        self.levels: int
        self.cap: int
        self.levels, self.cap = tree.carve(window) if tree else (0, 0)  # (0, 0): a plain chain
        self.universe = universe(self.levels, tree.width, torch.device(device)) if self.levels else None
        self.auto = (
            AutoBudget(tree.gain_bar(window), tree.tail_worth) if self.levels and tree.budget == "auto" else None
        )
        self.arange_w = torch.arange(w, device=device)
        self.depths = torch.arange(w + 1, device=device)
        self.positions = torch.arange(self.length, device=device)
        self.band: BandMask | None = None

    @property
    def board_width(self) -> int:
        return self.length + self.drafts + 1

    @property
    def slot_count(self) -> int:
        return self.drafts

    @property
    def block_slack(self) -> int:
        """Cache slots past the image that a block may write into."""
        return self.size

    def settled(self, fl: Flight) -> torch.Tensor:
        """Committed positions [B, length]: a prefix."""
        return self.positions < fl.committed.unsqueeze(1)

    def start(self, rows: int, vocab: int, cache) -> None:
        w, dev = self.drafts, self.device
        self.band = BandMask(causal(self.size, dev), cache.capacity)
        self.p = torch.zeros(rows, w + 1, vocab, device=dev)  # spine targets of the last forward
        self.tokens = torch.zeros(rows, w, dtype=torch.int64, device=dev)
        self.q = torch.zeros(rows, w, vocab, device=dev)
        self.step = torch.zeros(rows, dtype=torch.int64, device=dev)
        self.spine = torch.full((rows,), w, dtype=torch.int64, device=dev)
        k = self.targets.support_size  # top-k ids of those targets
        self.support = None if k is None else torch.zeros(rows, w + 1, k, dtype=torch.int64, device=dev)
        if self.auto:
            self.auto.start(rows, w, dev)
        self._empties(rows)

    def _empties(self, b: int) -> None:
        """The empty slots and tree of a window without drafts, for b rows: made once per batch size
        (a recorded step must not build a cache of them as it runs)."""
        empty = torch.zeros(b, 0, dtype=torch.int64, device=self.device)
        q = torch.zeros(b, 0, self.q.shape[-1], device=self.device)
        self.no_slots = Slots(empty, q, empty.bool(), empty, q, empty.bool())
        none = torch.zeros(b, 0, 1, dtype=torch.int64, device=self.device)
        self.no_tree = none, none.bool()

    def admit(self, fl: Flight, rows: torch.Tensor, first: torch.Tensor, cache) -> None:
        fl.board[rows] = 0
        fl.board[rows, 0] = first
        if self.auto:
            self.auto.reset(rows)

    def select(self, rows: torch.Tensor) -> None:
        self.p, self.tokens, self.q, self.step = self.p[rows], self.tokens[rows], self.q[rows], self.step[rows]
        self.spine = self.spine[rows]
        if self.support is not None:
            self.support = self.support[rows]
        if self.auto:
            self.auto.select(rows)
        self._empties(rows.shape[0])

    # --- the step's parts -------------------------------------------------------------------

    def slots(self, fl: Flight) -> Slots:
        w, n = self.drafts, fl.committed
        if not w:  # plain AR: no window
            return self.no_slots
        positions = n[:, None] + self.arange_w
        j = self.arange_w + self.step[:, None]  # where each slot's position sat in the last block
        live = fl.live[:, None]
        has_p = (j <= self.spine[:, None]) & live
        belief = torch.where(has_p[..., None], gather_rows(self.p, j.clamp(max=w)), self.targets.prior(positions))
        jo = j.clamp(max=w - 1)
        support = None if self.support is None else gather_rows(self.support, j.clamp(max=w))
        previous = earlier(fl.board, positions, self.repeat, lambda at: at < n[:, None])
        return Slots(
            positions,
            belief,
            has_p,
            self.tokens.gather(1, jo),
            gather_rows(self.q, jo),
            (j < w) & live,
            support,
            previous,
        )

    def segments(self, fl: Flight, slots: Slots, tokens, q, drafting, draws) -> Segments:
        self.tokens, self.q = tokens, q  # the next window's old drafts
        return Segments(Window(tokens, q, *self.no_tree), slots.positions, self.size, drafting, draws)

    def block(self, fl: Flight, seg: Segments, cache) -> ChainBlock:
        n, w = fl.committed, self.drafts
        last = (n - 1).clamp(min=0).unsqueeze(1)
        root = fl.board.gather(1, last)
        m = (self.length - 1 - n).clamp(0, w) if w else None  # no drafts: nothing to verify
        tree = self._tree(seg, root[:, 0], m) if self.levels and m is not None else None
        if tree is None or m is None:  # a plain chain this iteration
            assert self.band is not None  # laid out by start()
            return ChainBlock(
                torch.cat([root, seg.window.tokens], 1) if w else root,
                last + self.depths,
                self.band(cache.lengths),
                m,
                n.unsqueeze(1) + self.depths,
            )
        tb, value = tree
        structure = per_model_row(tb.structure, cache.rows // n.shape[0])
        return ChainBlock(
            tb.tokens,
            last + tb.depth,
            block_mask(cache.lengths, cache.capacity, structure),
            torch.minimum(m, tb.nodes.spine),
            n[:, None] + self.depths,
            tb.nodes,
            value,
        )

    def _tree(self, seg: Segments, root: torch.Tensor, m: torch.Tensor) -> tuple[TreeBlock, torch.Tensor] | None:
        """This iteration's trees and each row's tree value (None when no row's tree holds a
        sibling: the chain's own path).
        A recorded step never reads the device here: it always lays out the tree, whose budget may
        leave it without a sibling (then it verifies and commits exactly as the chain would)."""
        uni, win, w, d = self.universe, seg.window, self.drafts, self.levels
        assert uni is not None  # a tree's universe
        static = recording()
        view = None
        if self.auto:
            view = self.auto.prepare(m)
            q, spine = win.q[:, :d], seg.drafting.local(win.tokens[:, :d])
            spine_q = q.gather(-1, spine[..., None])[..., 0]
            top = q.topk(2, -1)
            runner_up = torch.where(top.indices[..., 0] == spine, top.values[..., 1], top.values[..., 0])
            if not static and not self.auto.worth_trying(view, spine_q, runner_up, self.cap, self.tree.width):
                return None
        ranking = rank_candidates(self.tree, uni, win, seg.positions, seg.drafting, m)
        count = ranking.available(self.cap)
        if self.auto and view is not None:
            count = torch.minimum(count, self.auto.count(view, ranking.best, self.cap))
        nodes = select(uni, ranking, count, w - count)
        if not static and max(nodes.ranks) <= 1:
            return None
        value = (ranking.values * ((nodes.index >= 0) & ~uni.spine)).sum(1)
        return arrange(nodes, root, win.tokens, win.cand, self.size), value

    def commit(self, fl: Flight, seg: Segments, block: ChainBlock, p, support, k, nxt, path, cache) -> Commit:
        n = fl.committed
        active = n < self.length
        k = torch.where(active, k, 0)
        # the accepted path and the sampled token; entries past the path land where later commits
        # overwrite them, finished rows write into slack
        tree = block.tree
        if self.drafts:
            accepted = block.tokens.gather(1, path[:, 1:]) if tree else block.tokens[:, 1:]
            fl.board.scatter_(1, n[:, None] + self.arange_w, accepted)
        fl.board.scatter_(1, (n + k).unsqueeze(1), nxt.unsqueeze(1))
        self.step = (k + 1) * active
        group = cache.rows // n.shape[0]
        # a chain keeps a prefix of its block, already in place; a tree's path is moved there (only
        # its first levels + 1 entries: a path deeper than the tree runs along the spine, in place)
        keep = per_model_row(path[:, : self.levels + 1], group) if tree else None
        cache.commit(keep, per_model_row(self.step, group))
        self.p, self.support = p, support
        off_spine = torch.zeros_like(k)
        if tree:
            self.spine = tree.spine
            off_spine = ((path[:, 1:] > self.spine[:, None]) & (self.arange_w < k[:, None])).sum(1)
        elif self.levels:  # a tree's iteration without siblings: the whole window is spine
            self.spine = torch.full_like(self.spine, self.drafts)
        if self.auto:
            assert block.m is not None  # a tree has drafts
            value = block.tree_value if block.tree_value is not None else torch.zeros_like(k)
            self.auto.update(k - off_spine, off_spine, block.m, value, active)
        return Commit(self.step, self.size * active, off_spine)
