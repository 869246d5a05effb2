"""PJD: row-parallel 2-D Jacobi decoding, a layout part (DESIGN.md section 4.4).

The image is R rows of ``RL`` tokens (C cells, plus the forced end-of-line token when the layout has
one; the end-of-image token is the tail of the last row). Row r joins once the row above holds
``c`` committed tokens (``c >= C`` means: once the row above is complete, EOL included, so that
only one row is ever in flight and PJD is exact SJD with windows cut at row ends).

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
import time
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from .drafters import Slots
from .draws import Draws
from .errors import ConfigError
from .jacobi import JacobiDecoder
from .rng import Stream
from .stats import DecodeStats


@dataclass(frozen=True)
class RowParallel:
    """PJD's layout options.

    context: c, committed tokens the row above needs before a row joins (None: from ``ratio``).
    ratio: resolution-free coverage c / C (used when ``context`` is None); c = round(ratio * C).
    max_rows: rows in flight at most (segments per block); None: ceil(C / c) + 1.
    """

    context: int | None = None
    ratio: float = 0.5
    max_rows: int | None = None

    def __post_init__(self):
        if self.context is not None and (isinstance(self.context, bool) or not isinstance(self.context, int)
                                         or self.context < 1):
            raise ConfigError(f"pjd_context must be an integer >= 1, got {self.context!r}")
        if isinstance(self.ratio, bool) or not isinstance(self.ratio, (int, float)) or not 0 < self.ratio <= 1:
            raise ConfigError(f"pjd_ratio must lie in (0, 1], got {self.ratio!r}")
        if self.max_rows is not None and (isinstance(self.max_rows, bool) or not isinstance(self.max_rows, int)
                                          or self.max_rows < 1):
            raise ConfigError(f"pjd_rows must be an integer >= 1, got {self.max_rows!r}")

    def context_for(self, cols: int) -> int:
        c = self.context if self.context is not None else max(1, round(self.ratio * cols))
        return min(c, cols)

    def segments(self, rows: int, cols: int) -> int:
        a = self.max_rows if self.max_rows is not None else math.ceil(cols / self.context_for(cols)) + 1
        return max(1, min(a, rows))


@dataclass
class Plan:
    """Which rows are in flight this iteration; every field [B, A] (segment a <-> row base + a)."""

    rows: torch.Tensor        # row index (clamped into range)
    cnt: torch.Tensor         # committed tokens of that row
    window: torch.Tensor      # an incomplete row in flight: it owns drafts
    in_block: torch.Tensor    # the segment is in this iteration's block
    is_top: torch.Tensor      # the lowest incomplete row (exact SJD)
    w: torch.Tensor           # drafts it puts in the block
    anchor_pos: torch.Tensor  # raster position of its anchor
    shared: torch.Tensor      # the anchor is a committed, uncached tail: kept, seen by lower rows
    top: torch.Tensor         # [B] top row (R when finished)
    live: torch.Tensor        # [B] sequence not finished


@dataclass
class Memory:
    """What the last iteration leaves for the next window: its drafts and the targets it saw."""

    base: torch.Tensor        # [B] row of segment 0
    window: torch.Tensor      # [B, A]
    cnt: torch.Tensor         # [B, A] committed count before that iteration's commit
    w: torch.Tensor           # [B, A] drafts in the block (-1: not in the block)
    p: torch.Tensor           # [B, At, Wt + 1, V] target after each block node
    tokens: torch.Tensor      # [B, A, W] drafts
    q: torch.Tensor           # [B, A, W, V] their draft distributions


def row_causal_mask(anchor_pos, shared, node_ok, slot_pos):
    """The row-causal attention of one block, per cache row.

    anchor_pos, shared [R, A]; node_ok [R, A, T1] (segment a's nodes 0..w_a); slot_pos [R, C]
    raster position of each committed cache slot (-1 for the prompt). Returns the block structure
    [R, N, N] and the visible cache slots [R, N, C] (N = A * T1) for :func:`masks.block_mask`.
    """
    r, a, t1 = node_ok.shape
    dev = node_ok.device
    seg = torch.arange(a, device=dev).repeat_interleave(t1)
    idx = torch.arange(t1, device=dev).repeat(a)
    ok = node_ok.reshape(r, a * t1)
    apos = anchor_pos.repeat_interleave(t1, 1)
    own = (seg[:, None] == seg[None, :]) & (idx[None, :] <= idx[:, None])
    own = own[None] & ok[:, :, None] & ok[:, None, :]
    tail = (idx == 0)[None] & shared.repeat_interleave(t1, 1) & ok
    lower = apos[:, None, :] < apos[:, :, None]
    structure = own | (tail[:, None, :] & lower & ok[:, :, None])
    structure |= torch.eye(a * t1, dtype=torch.bool, device=dev)
    cached = (slot_pos[:, None, :] < apos[:, :, None]) & ok[:, :, None]
    return structure, cached


class PJDDecoder(JacobiDecoder):
    """Row-parallel Jacobi decoding of B sequences; shares the model access, targets, prior and
    prefill with :class:`JacobiDecoder`."""

    def __init__(self, model, layout, sampling, parts):
        super().__init__(model, layout, sampling, parts)
        if parts.tree is not None:
            raise ConfigError("PJD drafts one chain per row; it does not take a proactive tree")
        plan = parts.layout2d or RowParallel()
        dev, rows, rl = self.device, layout.rows, layout.row_length
        self.context = plan.context_for(layout.cols)
        self.segments = plan.segments(rows, layout.cols)
        self.row_start = torch.arange(rows, device=dev) * rl
        self.row_len = torch.full((rows,), rl, device=dev)
        self.row_len[-1] += layout.end_id is not None
        need = torch.full((rows,), self.context, device=dev)
        if self.context >= layout.cols:
            need[1:] = self.row_len[:-1]
        need[0] = 0
        self.need = need
        self.row_of = (torch.arange(layout.length, device=dev) // rl).clamp(max=rows - 1)

    # --- which rows are in flight ---------------------------------------------------------------

    def plan(self, cnt: torch.Tensor, uncached: torch.Tensor) -> Plan:
        b, nrows = cnt.shape
        seqs = torch.arange(b, device=self.device)
        incomplete = cnt < self.row_len
        live = incomplete.any(1)
        top = torch.where(live, incomplete.long().argmax(1), nrows)
        # a row completed last iteration while the row below was under way: cache its tail first
        pending = (live & (top > 0) & uncached[seqs, (top - 1).clamp(min=0)]
                   & (cnt[seqs, top.clamp(max=nrows - 1)] > 0))
        rows = (top - pending.long())[:, None] + torch.arange(self.segments, device=self.device)
        valid = live[:, None] & (rows < nrows)
        rows = rows.clamp(max=nrows - 1)
        c = cnt.gather(1, rows)
        up = cnt.gather(1, (rows - 1).clamp(min=0))
        rlen = self.row_len[rows]
        window = valid & (rows >= top[:, None]) & (c < rlen) & ((rows == 0) | (up >= self.need[rows]))
        pend = valid & (rows < top[:, None])
        window &= (window | pend).long().cumprod(1).bool()          # rows in flight are consecutive
        cap = torch.where(rows > top[:, None], up - c, rlen)
        w = torch.minimum(rlen - c - 1, cap).clamp(0, self.parts.window - 1)
        w = torch.where(window, w, 0)
        is_top = window & (rows == top[:, None])
        apos = self.row_start[rows] + c - 1
        arow = self.row_of[apos.clamp(min=0)]
        acnt = cnt.gather(1, arow)
        tail = (apos >= 0) & (apos == self.row_start[arow] + acnt - 1) & uncached.gather(1, arow)
        in_block = pend | is_top | (window & ((w > 0) | tail))
        return Plan(rows, c, window, in_block, is_top, w, apos, in_block & tail, top, live)

    # --- the loop -----------------------------------------------------------------------------

    def run(self, prefixes: list[list[int]], seeds: list[int], progress: bool = False,
            batch_size: int | None = None):
        """As :meth:`JacobiDecoder.run`, except that rows are not refilled: with ``batch_size``
        the sequences are decoded in batches, one batch after another."""
        b = len(seeds)
        if not batch_size or batch_size >= b:
            return self._run(prefixes, seeds, progress)
        group = len(prefixes) // b
        runs = [self._run(prefixes[i * group:(i + batch_size) * group], seeds[i:i + batch_size], progress)
                for i in range(0, b, batch_size)]
        return torch.cat([t for t, _ in runs]), DecodeStats.concat([s for _, s in runs])

    def _run(self, prefixes: list[list[int]], seeds: list[int], progress: bool):
        t_start = time.perf_counter()
        b, length, nrows = len(seeds), self.layout.length, self.layout.rows
        a_max, wd = self.segments, self.parts.window - 1
        group, prefixes, base, cache, draws, stats = self._start(prefixes, seeds, a_max * (wd + 1), a_max * wd)
        bar = tqdm(total=b * length, disable=not progress, unit="tok", desc="decoding")
        seqs = torch.arange(b, device=self.device)

        board = self._initial_guess(draws)       # committed tokens; elsewhere the newest guess
        board[:, 0] = self._prefill(prefixes, base, cache, draws)
        slots = torch.arange(cache.capacity, device=self.device)
        slot_pos = torch.where(slots[None] < cache.lengths[:, None], -1, length)
        cnt = torch.zeros(b, nrows, dtype=torch.int64, device=self.device)
        cnt[:, 0] = 1
        uncached = torch.zeros(b, nrows, dtype=torch.bool, device=self.device)
        uncached[:, 0] = True
        stats.admit(list(range(b)))
        bar.update(b)
        memory = None

        def rep(x):
            return x.repeat_interleave(group, 0)

        while True:
            plan = self.plan(cnt, uncached)
            if not bool(plan.live.any()):
                break
            draws = Draws(draws.seeds, draws.iteration + plan.live)
            drafts, q = self._windows(plan, memory, draws, board)

            # the block: segments 0..At-1, nodes 0..Wt each (anchor, drafts)
            a_t = int((plan.in_block * torch.arange(1, a_max + 1, device=self.device)).max())
            w_t = int(plan.w[:, :a_t].max())
            t = torch.arange(w_t + 1, device=self.device)
            apos, w, shared = plan.anchor_pos[:, :a_t], plan.w[:, :a_t], plan.shared[:, :a_t]
            node_ok = plan.in_block[:, :a_t, None] & (t <= w[..., None])
            node_pos = torch.where(node_ok, apos[..., None] + t, 0)
            d, qd = drafts[:, :a_t, :w_t], q[:, :a_t, :w_t]
            block = torch.cat([board.gather(1, apos.clamp(min=0))[..., None], d], -1)
            structure, visible = row_causal_mask(rep(apos), rep(shared), rep(node_ok), slot_pos)
            logits = self._forward(rep(block.flatten(1)), base[:, None] + rep(node_pos.flatten(1)),
                                   structure, cache, visible)
            p = self._targets(logits, (node_pos + 1).flatten(1)).view(b, a_t, w_t + 1, -1)

            # verify every row's chain; the top row also draws its next token
            ok = self.parts.verifier.accept(p[:, :, :w_t], qd, d, draws.uniform(node_pos[..., 1:], Stream.ACCEPT))
            k = (ok & node_ok[..., 1:]).long().cumprod(-1).sum(-1)
            is_top = plan.is_top[:, :a_t]
            ta = is_top.long().argmax(1)
            kt, target = k[seqs, ta], p[seqs, ta, k[seqs, ta]]
            if w_t:
                at = kt.clamp(max=w_t - 1)
                res = self.parts.verifier.residual(target, qd[seqs, ta, at], d[seqs, ta, at])
                target = torch.where((kt < w[seqs, ta])[:, None], res, target)
            nxt = draws.sample(target, apos[seqs, ta] + 1 + kt, Stream.SAMPLE)
            step = k + is_top.long()

            # commit: tokens onto the board, kept K/V into the cache (with their raster positions)
            values = torch.cat([d, torch.zeros_like(k)[..., None]], -1)
            values = torch.where(t == k[..., None], nxt[:, None, None], values)
            board.scatter_(1, torch.where(t < step[..., None], node_pos + 1, length).flatten(1), values.flatten(1))
            keep = node_ok & (((t == 0) & shared[..., None]) | ((t >= 1) & (t <= k[..., None])))
            keep_idx, counts = _kept(keep.flatten(1))
            dst = cache.lengths[:, None] + torch.arange(keep_idx.shape[1], device=self.device)
            slot_pos.scatter_(1, dst, rep(node_pos.flatten(1).gather(1, keep_idx)))
            cache.commit(rep(keep_idx), rep(counts))
            kept_tails = torch.zeros(b, nrows, dtype=torch.int64, device=self.device)
            kept_tails.scatter_add_(1, self.row_of[apos.clamp(min=0)], shared.long())
            uncached &= kept_tails == 0
            uncached[seqs[plan.live], plan.top[plan.live]] = True
            cnt.scatter_add_(1, plan.rows[:, :a_t], step)
            done = step.sum(1)
            stats.record(seqs, done, plan.live)
            bar.update(int(done.sum()))
            memory = Memory(plan.rows[:, 0], plan.window, plan.cnt, torch.where(plan.in_block, plan.w, -1),
                            p, drafts, q)

        bar.close()
        stats.finish(nfe=self.nfe, wall=time.perf_counter() - t_start, forward=self.forward_time)
        return board[:, :length], stats

    def _initial_guess(self, draws: Draws) -> torch.Tensor:
        """[B, length + 1]: a prior draw per cell, the forced token where forced; the last column
        is scratch space for writes that land nowhere."""
        b, length = draws.seeds.shape[0], self.layout.length
        lo, hi = self.layout.image_ids
        pos = torch.arange(length, device=self.device).expand(b, -1)
        u = draws.uniform(pos, Stream.DRAFT).to(self.device)
        guess = lo + (u * (hi - lo)).long().clamp(max=hi - lo - 1)
        guess = torch.where(self.forced >= 0, self.forced, guess)
        return torch.cat([guess, torch.zeros_like(guess[:, :1])], 1)

    def _windows(self, plan: Plan, memory: Memory | None, draws: Draws, board: torch.Tensor):
        """Drafts [B, A, W] and their q [B, A, W, V] for every row in flight. A slot's belief is the
        newest target for its position from the last forward, else the layout prior; an earlier
        draft with no newer target stays as it was (its q still holds)."""
        b, a = plan.rows.shape
        wd, v, length = self.parts.window - 1, self.allowed.numel(), self.layout.length
        if wd == 0:
            return (torch.zeros(b, a, 0, dtype=torch.int64, device=self.device),
                    torch.zeros(b, a, 0, v, device=self.device))
        i = torch.arange(wd, device=self.device)
        pos = self.row_start[plan.rows][..., None] + plan.cnt[..., None] + i
        inside = plan.window[..., None] & (plan.cnt[..., None] + i < self.row_len[plan.rows][..., None])
        pos = torch.where(inside, pos, 0)
        belief = self.prior(pos)
        has_belief = torch.zeros_like(inside)
        has_old = torch.zeros_like(inside)
        old_tokens = torch.zeros_like(pos)
        old_q = torch.zeros_like(belief)
        if memory is not None:
            sb = torch.arange(b, device=self.device)[:, None, None]
            a_prev, a_p = memory.window.shape[1], memory.p.shape[1]
            rel = plan.rows - memory.base[:, None]
            rel_c = rel.clamp(0, a_prev - 1)
            match = plan.window & (rel >= 0) & (rel < a_prev) & memory.window.gather(1, rel_c)
            j = (plan.cnt - memory.cnt.gather(1, rel_c))[..., None] + i
            has_belief = match[..., None] & (j <= memory.w.gather(1, rel_c)[..., None]) & inside
            fresh = memory.p[sb, rel_c.clamp(max=a_p - 1)[..., None], j.clamp(0, memory.p.shape[2] - 1)]
            belief = torch.where(has_belief[..., None], fresh, belief)
            has_old = match[..., None] & (j < wd) & inside
            jo = j.clamp(0, wd - 1)
            old_tokens = memory.tokens[sb, rel_c[..., None], jo]
            old_q = memory.q[sb, rel_c[..., None], jo]
        flat = Slots(pos.flatten(1), belief.flatten(1, 2), has_belief.flatten(1), old_tokens.flatten(1),
                     old_q.flatten(1, 2), has_old.flatten(1))
        tokens, q = self.parts.drafter.draft(flat, draws)
        tokens, q = tokens.view(b, a, wd), q.view(b, a, wd, v)
        stay = has_old & ~has_belief
        tokens = torch.where(stay, old_tokens, tokens)
        q = torch.where(stay[..., None], old_q, q)
        board.scatter_(1, torch.where(inside, pos, length).flatten(1), tokens.flatten(1))
        return tokens, q


def _kept(keep: torch.Tensor):
    """Block indices [B, N] of the kept nodes first, in block order, and their counts [B]."""
    n = keep.shape[1]
    order = torch.arange(n, device=keep.device)
    idx = torch.where(keep, order, order + n).sort(1).values
    return torch.where(idx < n, idx, idx - n), keep.sum(1)
