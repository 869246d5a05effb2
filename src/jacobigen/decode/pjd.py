"""PJD: row-parallel 2-D Jacobi decoding, a schedule part (docs/DESIGN.md §4.4).

The image is R rows of ``RL`` tokens (C cells, plus the forced end-of-line token when the layout has
one; the end-of-image token is the tail of the last row). A video is its frames' rows one after the
other (a frame's end-of-frame token is the tail of its last row). Row r joins once the row above
holds ``c`` committed tokens (``c >= C`` means: once the row above is complete, EOL included, so that
only one row is ever in flight and PJD is exact SJD with windows cut at row ends); the first row of
a frame has no row above it in its frame and joins once the frame before is complete, so rows run
in parallel within a frame only.

One iteration forwards one block made of *segments*, one per row in flight, lowest row first:
``[anchor, d_1 .. d_w]``. The anchor is the token just before the row's first uncommitted cell:
the row's own last committed token (its *tail*), or, for a row with nothing committed yet, the
token before the row (the forced EOL, or the newest guess the row above holds there). A row never
drafts past its end nor, below the top row, past the committed count of the row above.

Row-causal attention: every query of a segment sees every *committed* token whose raster position
is below its segment's anchor -- from the KV cache, or, for row tails not cached yet, their copy in
the block as an anchor of a segment -- then its own anchor and its own earlier drafts; never another
row's drafts. RoPE positions are prompt length + raster position; the cache is kept in generation
order, and ``slot_pos`` records the raster position of each cache slot.

Verification (the method's verifier part, so relaxed acceptance composes): the top row -- the
lowest incomplete one -- is exact SJD (accepted prefix plus a residual or bonus draw, at least one
token per iteration); lower rows commit their accepted prefix only, and their rejected draft is
re-drafted next iteration from the newest target. Kept K/V: a segment's anchor when it is a
committed tail not yet cached, plus the accepted drafts; the top row's new token becomes its
uncached tail. A row that completes while the row below is already under way keeps one more
segment ``[tail]`` for one iteration, so that every committed token lands in the cache exactly once.

Lossy for ``c < C``: lower rows condition on an incomplete row above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

import torch

from ..core.errors import ConfigError
from ..core.masks import block_mask, row_causal_mask
from ..core.recording import recording
from ..core.registry import register
from ..core.rng import Stream
from ..parts.drafters import Slots, earlier
from ..parts.tree import arrange, rank_candidates, select, universe
from ..parts.verifiers import Window
from .engine import Commit, Flight, ForwardBlock, Segments, model_rows, per_model_row

TREE_BUDGET = 3  # rows have no window to carve a tree from: a few siblings, added to each row


@register(
    "pjd",
    "schedule",
    "PJD's row-parallel layout: a row joins once the row above has c tokens",
    prefix="pjd_",
    defaults={"tree_budget": TREE_BUDGET},
)
@dataclass(frozen=True)
class RowParallel:
    """PJD's layout options (the window is then per row).

    context: c, committed tokens the row above needs before a row joins (None: from ``ratio``).
    ratio: resolution-free coverage c / C (used when ``context`` is None); c = round(ratio * C).
    rows: rows in flight at most (segments per block); None: ceil(C / c) + 1.

    The paper uses c = 16 of C = 48 columns on Lumina-mGPT (coverage 1/3; 0.25 in its resolution
    study); our grids are 16 wide, where c/C = 1/2 (c = 8) is the default. Lossy for every c: with
    c = C it is exact SJD with windows cut at row ends, but the label does not depend on options.
    """

    lossless = False
    context: int | None = None
    ratio: float = 0.5
    rows: int | None = None

    def __post_init__(self):
        if self.context is not None and (
            isinstance(self.context, bool) or not isinstance(self.context, int) or self.context < 1
        ):
            raise ConfigError(f"pjd_context must be an integer >= 1, got {self.context!r}")
        if isinstance(self.ratio, bool) or not isinstance(self.ratio, (int, float)) or not 0 < self.ratio <= 1:
            raise ConfigError(f"pjd_ratio must lie in (0, 1], got {self.ratio!r}")
        if self.rows is not None and (isinstance(self.rows, bool) or not isinstance(self.rows, int) or self.rows < 1):
            raise ConfigError(f"pjd_rows must be an integer >= 1, got {self.rows!r}")

    def build(self, layout, window: int, tree, targets, device) -> Rows:
        """The schedule this part brings (a method without a schedule part runs the chain)."""
        return Rows(layout, window, tree, self, targets, device)

    def context_for(self, cols: int) -> int:
        c = self.context if self.context is not None else max(1, round(self.ratio * cols))
        return min(c, cols)

    def segments(self, rows: int, cols: int) -> int:
        a = self.rows if self.rows is not None else math.ceil(cols / self.context_for(cols)) + 1
        return max(1, min(a, rows))


@dataclass
class Plan:
    """Which rows are in flight this iteration; every field [B, A] (segment a <-> row base + a)."""

    rows: torch.Tensor  # row index (clamped into range)
    cnt: torch.Tensor  # committed tokens of that row
    window: torch.Tensor  # an incomplete row in flight: it owns drafts
    in_block: torch.Tensor  # the segment is in this iteration's block
    is_top: torch.Tensor  # the lowest incomplete row (exact SJD)
    w: torch.Tensor  # drafts it puts in the block
    anchor_pos: torch.Tensor  # raster position of its anchor
    shared: torch.Tensor  # the anchor is a committed, uncached tail: kept, seen by lower rows
    top: torch.Tensor  # [B] top row (R when finished)
    live: torch.Tensor  # [B] sequence not finished


@dataclass
class Iteration:
    """This iteration's decisions, handed from ``slots`` on: the plan, the segments and drafts the
    block holds (``a_t`` segments of ``w_t`` drafts), which slots lie inside their rows, and once
    drafted, every segment's drafts and their q."""

    plan: Plan
    a_t: int
    w_t: int
    inside: torch.Tensor  # [B, A, W]
    drafts: torch.Tensor | None = None  # [B, A, W]
    q: torch.Tensor | None = None  # [B, A, W, V]


@dataclass
class RowsBlock(ForwardBlock):
    """PJD's block, with which of its nodes are real ([B, A_t, size])."""

    node_ok: torch.Tensor | None = None


@dataclass
class Memory:
    """What the last iteration leaves for the next window: its drafts and the targets it saw."""

    base: torch.Tensor  # [B] row of segment 0
    window: torch.Tensor  # [B, A]
    cnt: torch.Tensor  # [B, A] committed count before that iteration's commit
    w: torch.Tensor  # [B, A] drafts in the block (-1: not in the block)
    p: torch.Tensor  # [B, At, Wt + 1, V] target after each block node
    tokens: torch.Tensor  # [B, A, W] drafts
    q: torch.Tensor  # [B, A, W, V] their draft distributions

    STATE: ClassVar = ("base", "window", "cnt", "w", "p", "tokens", "q")


class Rows:
    """PJD's row-parallel schedule: one segment ``[anchor, drafts]`` per row in flight (with the
    proactive tree's nodes after its drafts when the method has one: a row's window counts its
    drafts, so the tree is added to it, at most ``tree_budget`` nodes, not carved out); the top row
    is verified exactly, lower rows keep their accepted prefix."""

    STATE = ("cnt", "memory", "slot_pos", "uncached")  # what a step reads and replaces (decode.replay)

    def __init__(self, layout, window: int, tree, plan: RowParallel, targets, device):
        lines = layout.lines(device)
        self.layout, self.targets, self.device, self.tree = layout, targets, device, tree
        self.nrows = rows = lines.start.shape[0]
        self.wd = window - 1
        if tree and tree.budget == "auto":
            raise ConfigError("tree_budget=auto sizes a tree inside the 1-D window; PJD's rows take a number or 'full'")
        levels = tree.levels if tree else 0  # each segment's tree spans at most these depths
        self.universes = {d: universe(d, tree.width, torch.device(device)) for d in range(1, levels + 1)}
        self.context = plan.context_for(layout.cols)
        self.segments_max = plan.segments(rows, layout.cols)
        self.row_start, self.row_len = lines.start, lines.length
        # the rows' spans tile the sequence: the end-of-frame and end tokens belong to the row they close
        self.row_of = torch.repeat_interleave(torch.arange(rows, device=device), lines.length)
        self.pos_col = torch.arange(layout.length, device=device) - self.row_start[self.row_of]
        # a frame's first row has no row above it in its frame: it waits for the frame before to complete
        need = torch.full((rows,), self.context, device=device)
        if self.context >= layout.cols:
            need[1:] = self.row_len[:-1]
        need[1:] = torch.where(lines.opens_frame[1:], self.row_len[:-1], need[1:])
        need[0] = 0
        self.need = need

    def levels(self, w: int) -> int:
        """Depths with sibling candidates in a segment of w drafts (0: no tree)."""
        return self.tree.added(w)[0] if self.tree else 0

    def size(self, w: int) -> int:
        """Nodes of a segment with w drafts: anchor, drafts, tree."""
        return 1 + w + (self.tree.added(w)[1] if self.tree else 0)

    @property
    def board_width(self) -> int:
        return self.layout.length + 1

    @property
    def slot_count(self) -> int:
        return self.segments_max * self.wd

    @property
    def block_slack(self) -> int:
        return self.segments_max * self.size(self.wd)

    def settled(self, fl: Flight) -> torch.Tensor:
        """Committed positions [B, length]: a prefix of each image row."""
        return self.pos_col < self.cnt[:, self.row_of]

    def start(self, rows: int, vocab: int, cache) -> None:
        dev, a, nrows = self.device, self.segments_max, self.nrows
        self.cnt = self.row_len.repeat(rows, 1)  # free rows count as complete
        self.uncached = torch.zeros(rows, nrows, dtype=torch.bool, device=dev)
        self.slot_pos = torch.full((cache.rows, cache.capacity), self.layout.length, device=dev)
        zeros = torch.zeros(rows, a, dtype=torch.int64, device=dev)
        self.memory = Memory(
            torch.zeros(rows, dtype=torch.int64, device=dev),
            zeros.bool(),
            zeros,
            zeros - 1,
            # the shape and strides a recorded step keeps: a view of each segment's targets, tree included
            self._targets(rows, vocab),
            torch.zeros(rows, a, self.wd, dtype=torch.int64, device=dev),
            torch.zeros(rows, a, self.wd, vocab, device=dev),
        )

    def admit(self, fl: Flight, fresh: torch.Tensor, first: torch.Tensor, cache) -> None:
        rows = fresh.nonzero().flatten()
        guess = self._initial_guess(fl.draws)
        guess[:, 0] = 0
        fl.board[rows] = guess[rows]
        fl.board[rows, 0] = first
        self.cnt[rows] = 0
        self.cnt[rows, 0] = 1
        self.uncached[rows] = False
        self.uncached[rows, 0] = True
        group = cache.rows // fresh.shape[0]
        mrows = model_rows(rows, group)
        slots = torch.arange(cache.capacity, device=self.device)
        self.slot_pos[mrows] = torch.where(slots[None] < cache.lengths[mrows, None], -1, self.layout.length)
        self.memory.window[rows] = False

    def select(self, rows: torch.Tensor) -> None:
        group = self.slot_pos.shape[0] // self.cnt.shape[0]
        self.cnt, self.uncached = self.cnt[rows], self.uncached[rows]
        self.slot_pos = self.slot_pos[model_rows(rows, group)]
        m = self.memory
        p = m.p[rows]
        if p.shape[1:3] == (self.segments_max, self.wd + 1):  # the full layout a recorded step keeps
            p = self._targets(rows.shape[0], p.shape[-1]).copy_(p)
        self.memory = Memory(m.base[rows], m.window[rows], m.cnt[rows], m.w[rows], p, m.tokens[rows], m.q[rows])

    def _targets(self, rows: int, vocab: int) -> torch.Tensor:
        """Zeroed memory of the targets [rows, A, W + 1, V], laid out as the step leaves it (a view of
        every segment's targets, tree included), so that a recorded step sees one layout throughout."""
        return torch.zeros(rows, self.segments_max, self.size(self.wd), vocab, device=self.device)[:, :, : self.wd + 1]

    # --- which rows are in flight ---------------------------------------------------------------

    def plan(self, cnt: torch.Tensor, uncached: torch.Tensor) -> Plan:
        b, nrows = cnt.shape
        seqs = torch.arange(b, device=self.device)
        incomplete = cnt < self.row_len
        live = incomplete.any(1)
        top = torch.where(live, incomplete.long().argmax(1), nrows)
        # a row completed last iteration while the row below was under way: cache its tail first
        pending = live & (top > 0) & uncached[seqs, (top - 1).clamp(min=0)] & (cnt[seqs, top.clamp(max=nrows - 1)] > 0)
        rows = (top - pending.long())[:, None] + torch.arange(self.segments_max, device=self.device)
        valid = live[:, None] & (rows < nrows)
        rows = rows.clamp(max=nrows - 1)
        c = cnt.gather(1, rows)
        up = cnt.gather(1, (rows - 1).clamp(min=0))
        rlen = self.row_len[rows]
        window = valid & (rows >= top[:, None]) & (c < rlen) & ((rows == 0) | (up >= self.need[rows]))
        pend = valid & (rows < top[:, None])
        window &= (window | pend).long().cumprod(1).bool()  # rows in flight are consecutive
        cap = torch.where(rows > top[:, None], up - c, rlen)
        w = torch.minimum(rlen - c - 1, cap).clamp(0, self.wd)
        w = torch.where(window, w, 0)
        is_top = window & (rows == top[:, None])
        apos = self.row_start[rows] + c - 1
        arow = self.row_of[apos.clamp(min=0)]
        acnt = cnt.gather(1, arow)
        tail = (apos >= 0) & (apos == self.row_start[arow] + acnt - 1) & uncached.gather(1, arow)
        in_block = pend | is_top | (window & ((w > 0) | tail))
        return Plan(rows, c, window, in_block, is_top, w, apos, in_block & tail, top, live)

    # --- the step's parts -------------------------------------------------------------------------

    def slots(self, fl: Flight) -> Slots:
        """Plan the iteration (the one host read: how many segments and drafts the block needs),
        then each row's window slots. A slot's belief is the newest target for its position from
        the last forward, else the layout prior; an earlier draft with no newer target stays as it
        was (its q still holds)."""
        plan = self.plan(self.cnt, self.uncached)
        a = plan.rows.shape[1]
        if recording():  # a recorded step keeps every segment slot: one block shape
            a_t, w_t = a, self.wd
        else:
            a_t, w_t = torch.stack(
                [(plan.in_block * torch.arange(1, a + 1, device=self.device)).max(), plan.w.max()]
            ).tolist()
        b, wd = plan.rows.shape[0], self.wd
        i = torch.arange(wd, device=self.device)
        pos = self.row_start[plan.rows][..., None] + plan.cnt[..., None] + i
        inside = plan.window[..., None] & (plan.cnt[..., None] + i < self.row_len[plan.rows][..., None])
        pos = torch.where(inside, pos, 0)
        mem = self.memory
        sb = torch.arange(b, device=self.device)[:, None, None]
        a_prev, a_p = mem.window.shape[1], mem.p.shape[1]
        rel = plan.rows - mem.base[:, None]
        rel_c = rel.clamp(0, a_prev - 1)
        match = plan.window & (rel >= 0) & (rel < a_prev) & mem.window.gather(1, rel_c)
        j = (plan.cnt - mem.cnt.gather(1, rel_c))[..., None] + i
        has_belief = match[..., None] & (j <= mem.w.gather(1, rel_c)[..., None]) & inside
        fresh = mem.p[sb, rel_c.clamp(max=a_p - 1)[..., None], j.clamp(0, mem.p.shape[2] - 1)]
        belief = torch.where(has_belief[..., None], fresh, self.targets.prior(pos))
        has_old = match[..., None] & (j < wd) & inside
        jo = j.clamp(0, max(wd - 1, 0))
        old_tokens = mem.tokens[sb, rel_c[..., None], jo]
        old_q = mem.q[sb, rel_c[..., None], jo]
        settled = self.settled(fl)
        last = settled.shape[1] - 1  # the board's one more column is scratch
        previous = earlier(
            fl.board, pos.flatten(1), self.layout.repeat_offset, lambda at: settled.gather(1, at.clamp(max=last))
        )
        return Slots(
            pos.flatten(1),
            belief.flatten(1, 2),
            has_belief.flatten(1),
            old_tokens.flatten(1),
            old_q.flatten(1, 2),
            has_old.flatten(1),
            previous=torch.where(inside.flatten(1), previous, -1),
            plan=Iteration(plan, a_t, w_t, inside),
        )

    def segments(self, fl: Flight, slots: Slots, tokens, q, drafting, draws) -> Segments:
        it: Iteration = slots.plan
        b, a = it.plan.rows.shape
        wd, v = self.wd, q.shape[-1]
        stay = slots.has_old & ~slots.has_belief
        tokens = torch.where(stay, slots.old_tokens, tokens).view(b, a, wd)
        q = torch.where(stay[..., None], slots.old_q, q).view(b, a, wd, v)
        fl.board.scatter_(1, torch.where(it.inside.flatten(1), slots.positions, self.layout.length), tokens.flatten(1))
        a_t, w_t = it.a_t, it.w_t
        d, qd = tokens[:, :a_t, :w_t].flatten(0, 1), q[:, :a_t, :w_t].flatten(0, 1)
        apos = it.plan.anchor_pos[:, :a_t]
        positions = (apos[..., None] + 1 + torch.arange(w_t, device=self.device)).flatten(0, 1)
        none = torch.zeros(b * a_t, 0, 1, dtype=torch.int64, device=self.device)
        window = Window(d, qd, none, none.bool())
        drafting, draws = drafting.repeat(a_t), draws.repeat(a_t)
        it = replace(it, drafts=tokens, q=q)
        return Segments(window, positions, self.size(w_t), drafting, draws, per_row=a_t, plan=it)

    def block(self, fl: Flight, seg: Segments, cache) -> RowsBlock:
        it: Iteration = seg.plan
        plan, a_t, w_t, size = it.plan, it.a_t, it.w_t, seg.size
        b = plan.rows.shape[0]
        group = cache.rows // b
        apos, w, shared = plan.anchor_pos[:, :a_t], plan.w[:, :a_t], plan.shared[:, :a_t]
        anchors = fl.board.gather(1, apos.clamp(min=0)).flatten()
        within, nodes = None, None
        if self.levels(w_t):
            tb = self._tree(anchors, seg, w.flatten(), self.levels(w_t))
            depth, real = tb.depth.reshape(b, a_t, size), tb.real.view(b, a_t, size)
            tokens, within = tb.tokens.reshape(b, -1), per_model_row(tb.structure.view(b, a_t, size, size), group)
            nodes = tb.nodes
        else:
            depth = torch.arange(size, device=self.device)
            real = depth <= w[..., None]
            tokens = torch.cat([anchors[:, None], seg.window.tokens], 1).view(b, -1)
        node_ok = plan.in_block[:, :a_t, None] & real
        node_pos = torch.where(node_ok, apos[..., None] + depth, 0)

        structure, visible = row_causal_mask(
            per_model_row(apos, group),
            per_model_row(shared, group),
            per_model_row(node_ok, group),
            self.slot_pos,
            within,
        )
        depth_pos = apos[..., None] + 1 + torch.arange(w_t + 1, device=self.device)
        return RowsBlock(
            tokens,
            node_pos.flatten(1),
            block_mask(cache.lengths, cache.capacity, structure, visible),
            w.flatten(),
            depth_pos.flatten(0, 1),
            nodes,
            node_ok,
        )

    def _tree(self, anchors: torch.Tensor, seg: Segments, w: torch.Tensor, d: int):
        """Each segment's tree over d depths after its w [S] drafts: the best ``tree_budget`` nodes
        by value."""
        win = seg.window
        uni = self.universes[d]
        ranking = rank_candidates(self.tree, uni, win, seg.positions, seg.drafting, w)
        nodes = select(uni, ranking, ranking.available(self.tree.cap(d)), w)
        return arrange(nodes, anchors, win.tokens, win.cand, seg.size)

    def commit(self, fl: Flight, seg: Segments, block: RowsBlock, p, support, k, nxt, path, cache) -> Commit:
        it: Iteration = seg.plan
        plan, a_t, w_t, length, node_ok = it.plan, it.a_t, it.w_t, self.layout.length, block.node_ok
        assert node_ok is not None and it.drafts is not None and it.q is not None  # set by block and segments
        b, size = plan.rows.shape[0], seg.size
        group = cache.rows // b
        k, nxt, path = k.view(b, a_t), nxt.view(b, a_t), path.reshape(b, a_t, w_t + 1)
        step = k + plan.is_top[:, :a_t].long()

        # tokens onto the board: the accepted path, then the top row's sampled token
        t = torch.arange(w_t + 1, device=self.device)
        values = block.tokens.view(b, a_t, size).gather(2, path[..., 1:])
        values = torch.cat([values, torch.zeros_like(k)[..., None]], -1)
        values = torch.where(t == k[..., None], nxt[..., None], values)
        depth_pos = block.depth_pos.view(b, a_t, w_t + 1)
        fl.board.scatter_(1, torch.where(t < step[..., None], depth_pos, length).flatten(1), values.flatten(1))

        # kept K/V (with their raster positions): a shared anchor tail, then the accepted path
        keep = torch.zeros(b, a_t, size, dtype=torch.bool, device=self.device)
        keep.scatter_(2, path[..., 1:], t[1:] <= k[..., None])
        keep[..., 0] = plan.shared[:, :a_t] & node_ok[..., 0]
        keep_idx, counts = _kept(keep.flatten(1))
        dst = cache.lengths[:, None] + torch.arange(keep_idx.shape[1], device=self.device)
        self.slot_pos.scatter_(1, dst, per_model_row(block.node_pos.gather(1, keep_idx), group))
        cache.commit(per_model_row(keep_idx, group), per_model_row(counts, group))

        apos = plan.anchor_pos[:, :a_t]
        kept_tails = torch.zeros_like(self.cnt)
        kept_tails.scatter_add_(1, self.row_of[apos.clamp(min=0)], plan.shared[:, :a_t].long())
        top = torch.nn.functional.one_hot(plan.top.clamp(max=self.nrows - 1), self.nrows).bool()
        self.uncached = (self.uncached & (kept_tails == 0)) | (top & plan.live[:, None])
        self.cnt = self.cnt.scatter_add(1, plan.rows[:, :a_t], step)
        self.memory = Memory(
            plan.rows.amin(1),  # segment 0's row (a fresh tensor: one layout for a recorded step)
            plan.window,
            plan.cnt,
            torch.where(plan.in_block, plan.w, -1),
            p.view(b, a_t, size, -1)[:, :, : w_t + 1],
            it.drafts,
            it.q,
        )
        off_spine = (path[..., 1:] > plan.w[:, :a_t, None]) & (t[1:] <= k[..., None])
        return Commit(step.sum(1), node_ok.sum((1, 2)), off_spine.sum((1, 2)))

    def _initial_guess(self, draws) -> torch.Tensor:
        """[B, length + 1]: a prior draw per cell, the forced token where forced; the last column
        is scratch space for writes that land nowhere."""
        b, length = draws.seeds.shape[0], self.layout.length
        lo, hi = self.layout.image_ids
        pos = torch.arange(length, device=self.device).expand(b, -1)
        u = draws.uniform(pos, Stream.DRAFT).to(self.device)
        guess = lo + (u * (hi - lo)).long().clamp(max=hi - lo - 1)
        guess = torch.where(self.targets.forced >= 0, self.targets.forced, guess)
        return torch.cat([guess, torch.zeros_like(guess[:, :1])], 1)


def _kept(keep: torch.Tensor):
    """Block indices [B, N] of the kept nodes first, in block order, and their counts [B]."""
    n = keep.shape[1]
    order = torch.arange(n, device=keep.device)
    idx = torch.where(keep, order, order + n).sort(1).values
    return torch.where(idx < n, idx, idx - n), keep.sum(1)
