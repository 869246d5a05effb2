"""The Jacobi decoding loop (DESIGN.md section 3), batched over sequences.

One iteration: forward ``[last committed, drafts...]`` once, verify the drafts, commit the accepted
run plus one sampled token, keep their K/V, and let the drafter propose the next window from the
stale targets. Plain AR is the same loop with window 1 (no drafts).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from tqdm.auto import tqdm

from .drafters import Drafter, Slots
from .draws import Draws
from .errors import ConfigError
from .layout import ImageLayout
from .masks import block_mask, prefix_structure
from .mrs import gather_rows
from .rng import Stream
from .sampling import SamplingConfig, target_probs
from .stats import DecodeStats
from .tree import ProactiveTree, WindowShape
from .verifiers import Verifier, Window

if TYPE_CHECKING:
    from .pjd import RowParallel


@dataclass(frozen=True)
class Parts:
    drafter: Drafter
    verifier: Verifier
    window: int
    tree: ProactiveTree | None = None
    layout2d: RowParallel | None = None     # PJD's row-parallel layout (pjd.py), None: 1-D chain


def model_rows(rows: torch.Tensor, group: int) -> torch.Tensor:
    """Model rows of batch rows: a guided sequence owns a (cond, uncond) pair."""
    return (rows[:, None] * group + torch.arange(group, device=rows.device)).flatten()


@dataclass
class Flight:
    """The rows of a batch: row r decodes sequence ``seq[r]`` (-1: free) and has ``n[r]`` tokens."""

    seq: torch.Tensor         # [B]
    n: torch.Tensor           # [B] committed tokens (>= layout length: finished or free)
    base: torch.Tensor        # [B * group] prompt length of each model row
    tokens: torch.Tensor      # [B, length + W + 1]
    seeds: torch.Tensor       # [B] seed of the sequence in each row
    iteration: torch.Tensor   # [B] iterations that sequence has run
    queue: torch.Tensor       # [N] seeds of every sequence, in admission order
    next: int = 0             # next sequence to admit

    @classmethod
    def empty(cls, rows: int, group: int, length: int, width: int, seeds: list[int], device) -> "Flight":
        """``rows`` free rows (counted as finished: ``n = length``), ``width`` token slots each."""
        def zeros(*shape):
            return torch.zeros(shape, dtype=torch.int64, device=device)
        return cls(zeros(rows) - 1, zeros(rows) + length, zeros(rows * group), zeros(rows, width), zeros(rows),
                   zeros(rows), torch.tensor(seeds, dtype=torch.int64, device=device))

    @property
    def draws(self) -> Draws:
        return Draws(self.seeds, self.iteration)

    def select(self, rows: torch.Tensor, group: int) -> "Flight":
        return Flight(self.seq[rows], self.n[rows], self.base[model_rows(rows, group)], self.tokens[rows],
                      self.seeds[rows], self.iteration[rows], self.queue, self.next)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class JacobiDecoder:
    """Decodes B sequences of one layout; each advances by its own accepted length."""

    def __init__(self, model, layout: ImageLayout, sampling: SamplingConfig, parts: Parts):
        if parts.window < 1:
            raise ConfigError(f"window must be >= 1, got {parts.window}")
        self.model, self.layout, self.sampling, self.parts = model, layout, sampling, parts
        self.device = next(model.parameters()).device
        v = model.vocab_size
        self.allowed = layout.allowed(v, self.device)
        self.forced = layout.forced(self.device)
        self.uniform_prior = self.allowed.float() / self.allowed.sum()
        tree = parts.tree
        self.shape = WindowShape(parts.window - 1, min(tree.depth, parts.window - 1) if tree else 0,
                                 tree.width if tree else 1)

    # --- model access -------------------------------------------------------------------------

    def _forward(self, rows_tokens, positions, structure, cache, cached=None) -> torch.Tensor:
        """One timed forward of a block; ``structure`` and ``cached`` as in :func:`block_mask`."""
        mask = block_mask(cache.lengths, cache.capacity, structure, cached)
        _sync(self.device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            logits = self.model(rows_tokens, positions, mask, cache)
        _sync(self.device)
        self.forward_time += time.perf_counter() - t0
        self.nfe += 1
        return logits

    def _targets(self, logits: torch.Tensor, gen_positions: torch.Tensor) -> torch.Tensor:
        forced = self._forced_at(gen_positions)
        return target_probs(logits, self.sampling, self.allowed, forced)

    def _forced_at(self, gen_positions: torch.Tensor) -> torch.Tensor:
        inside = gen_positions < self.layout.length
        return torch.where(inside, self.forced[gen_positions.clamp(max=self.layout.length - 1)], -1)

    def prior(self, gen_positions: torch.Tensor) -> torch.Tensor:
        """Draft distribution for a position never evaluated: uniform over image ids, one-hot where
        the layout forces a token."""
        forced = self._forced_at(gen_positions)
        onehot = torch.nn.functional.one_hot(forced.clamp(min=0), self.allowed.numel()).float()
        return torch.where((forced >= 0)[..., None], onehot, self.uniform_prior)

    # --- the loop -----------------------------------------------------------------------------

    def run(self, prefixes: list[list[int]], seeds: list[int], progress: bool = False,
            batch_size: int | None = None):
        """prefixes: one token list per model row (cond, uncond interleaved when guided);
        seeds: one per sequence. At most ``batch_size`` sequences (default: all) are in flight;
        a finished sequence's row takes the next prompt (continuous refill).
        Returns (tokens [N, length], DecodeStats)."""
        t_start = time.perf_counter()
        total, length, shape = len(seeds), self.layout.length, self.shape
        w = shape.drafts
        b = min(batch_size or total, total)
        group, prefixes, _, cache, _, stats = self._start(prefixes, seeds, shape.size, w, b)
        fl = Flight.empty(b, group, length, length + w + 1, seeds, self.device)
        out = torch.zeros(total, length, dtype=torch.int64, device=self.device)
        bar = tqdm(total=total * length, disable=not progress, unit="tok", desc="decoding")
        arange_w = torch.arange(w, device=self.device)
        structure, spine = shape.structure(self.device), shape.spine().to(self.device)
        node_depth = shape.node_depth().to(self.device)

        self._admit(fl, cache, prefixes, stats, bar)
        live = torch.zeros(b, dtype=torch.bool, device=self.device)   # rows whose last forward counts
        step = torch.zeros(b, dtype=torch.int64, device=self.device)
        p = torch.zeros(b, shape.size, self.allowed.numel(), device=self.device)
        window = Window(torch.zeros(b, w, dtype=torch.int64, device=self.device),
                        torch.zeros(b, w, self.allowed.numel(), device=self.device), *self._no_tree(b))

        while True:
            # the next window: slot i holds position n + i; stale targets come from the spine
            if w:
                j = arange_w + step[:, None]
                has_p = (j <= w) & live[:, None]
                belief = torch.where(has_p[..., None], gather_rows(p[:, spine], j.clamp(max=w)),
                                     self.prior(fl.n[:, None] + arange_w))
                jo = j.clamp(max=w - 1)
                window = self._draft(Slots(fl.n[:, None] + arange_w, belief, has_p, window.tokens.gather(1, jo),
                                           gather_rows(window.q, jo), (j < w) & live[:, None]), fl.draws)
            active = fl.n < length
            if not bool(active.any()):
                break
            fl.iteration = fl.iteration + active
            draws, n = fl.draws, fl.n
            block = shape.block_tokens(fl.tokens.gather(1, (n - 1)[:, None]).squeeze(1), window.tokens, window.cand)
            node_pos = (n - 1)[:, None] + node_depth                       # generated position per node
            logits = self._forward(block.repeat_interleave(group, 0),
                                   fl.base[:, None] + node_pos.repeat_interleave(group, 0), structure, cache)
            p = self._targets(logits, node_pos + 1)       # p[:, i]: target right after block node i
            m = (length - n - 1).clamp(0, w)
            depth_pos = n[:, None] + torch.arange(w + 1, device=self.device)
            k, nxt, path = self.parts.verifier.verify(p, window, shape, m, depth_pos, draws)
            k = torch.where(active, k, 0)

            # commit the accepted path and the sampled token, keep their K/V (entries past the
            # path land in slots that later commits overwrite; finished rows write into slack)
            fl.tokens.scatter_(1, n[:, None] + arange_w, block.gather(1, path[:, 1:]))
            fl.tokens.scatter_(1, (n + k)[:, None], nxt[:, None])
            step = (k + 1) * active
            cache.commit(path.repeat_interleave(group, 0), step.repeat_interleave(group))
            stats.record(fl.seq, step, active)
            bar.update(int(step.sum()))
            fl.n = n + step

            # finished sequences leave; waiting ones take their rows
            done = active & (fl.n >= length)
            out[fl.seq[done]] = fl.tokens[done, :length]
            fl.seq = torch.where(done, -1, fl.seq)
            live = active & ~self._admit(fl, cache, prefixes, stats, bar)
            running = fl.n < length
            if fl.next == total and bool(running.any()) and 4 * int((~running).sum()) >= len(running):
                # nothing waits: a quarter of the rows are done, so stop paying for them
                rows = running.nonzero().flatten()
                fl, window, p, step, live = fl.select(rows, group), window.select(rows), p[rows], step[rows], live[rows]
                cache.select(model_rows(rows, group))
                self.parts.drafter.select(rows)

        bar.close()
        stats.finish(nfe=self.nfe, wall=time.perf_counter() - t_start, forward=self.forward_time)
        return out, stats

    def _start(self, prefixes, seeds, block: int, slots: int, rows: int | None = None):
        """Check the prompts, append the layout header, make a cache for ``rows`` sequences in
        flight (default: all) with room for ``block`` new tokens past the image, reset the parts.
        Returns (group, prefixes, base lengths, cache, draws at iteration 0, stats)."""
        group = 2 if self.sampling.guided else 1
        b, length = len(seeds), self.layout.length
        rows = rows or b
        if len(prefixes) != b * group:
            raise ConfigError(f"expected {b * group} prefixes for {b} sequences, got {len(prefixes)}")
        prefixes = [list(p) + list(self.layout.header) for p in prefixes]
        base = torch.tensor([len(p) for p in prefixes], device=self.device)
        if int(base.max()) + length > self.model.max_seq_len:
            raise ConfigError(f"prompt of {int(base.max())} tokens plus {length} image tokens exceeds "
                              f"the model's context of {self.model.max_seq_len}")
        if int(base.min()) < 1:
            raise ConfigError("every prompt needs at least one token")
        cache = self.model.new_cache(rows * group, int(base.max()) + length + block)
        draws = Draws(torch.tensor(seeds[:rows], dtype=torch.int64, device=self.device),
                      torch.zeros(rows, dtype=torch.int64, device=self.device))
        self.parts.drafter.start(rows, slots, self.allowed.numel(), self.device)
        self.parts.verifier.bind(self.model, self.layout)
        self.nfe, self.forward_time = 0, 0.0
        return group, prefixes, base, cache, draws, DecodeStats.start(b)

    def _admit(self, fl: Flight, cache, prefixes, stats: DecodeStats, bar) -> torch.Tensor:
        """Prefill the next waiting sequences into free rows; returns which rows started [B].

        A newcomer gets its own seed and iteration 0, so it draws exactly what it would alone."""
        b = fl.seq.numel()
        group = cache.rows // b
        free = (fl.seq < 0).nonzero().flatten()[:fl.queue.numel() - fl.next]
        fresh = torch.zeros(b, dtype=torch.bool, device=self.device)
        if not free.numel():
            return fresh
        ids = torch.arange(fl.next, fl.next + free.numel(), device=self.device)
        fl.next += free.numel()
        mrows = model_rows(free, group)
        pre = [prefixes[r] for i in ids.tolist() for r in range(i * group, (i + 1) * group)]
        base = torch.tensor([len(x) for x in pre], device=self.device)
        # the first sequences fill the empty cache; later ones are prefilled apart and moved in
        target = cache if fl.next == free.numel() else self.model.new_cache(len(pre), cache.capacity)
        seeds = fl.queue[ids]
        first = self._prefill(pre, base, target, Draws(seeds, torch.zeros_like(seeds)))
        if target is not cache:
            cache.assign(mrows, target)
        fresh[free] = True
        fl.seq[free], fl.n[free], fl.base[mrows] = ids, 1, base
        fl.seeds, fl.iteration = fl.seeds.clone(), fl.iteration.clone()
        fl.seeds[free], fl.iteration[free] = seeds, 0
        fl.tokens[free] = 0
        fl.tokens[free, 0] = first
        self.parts.drafter.reset(fresh)
        stats.admit(ids.tolist())
        bar.update(free.numel())
        return fresh

    def _prefill(self, prefixes, base, cache, draws) -> torch.Tensor:
        """One forward over all prompts; returns the first generated token per sequence."""
        width = int(base.max())
        rows = torch.zeros(len(prefixes), width, dtype=torch.int64, device=self.device)
        for r, pre in enumerate(prefixes):
            rows[r, :len(pre)] = torch.tensor(pre, device=self.device)
        if int(rows.max()) >= self.model.vocab_size or int(rows.min()) < 0:
            raise ConfigError(f"prompt token ids must lie in [0, {self.model.vocab_size})")
        positions = torch.arange(width, device=self.device).expand_as(rows)
        logits = self._forward(rows, positions, prefix_structure(base, width), cache)
        last = logits[torch.arange(len(prefixes)), base - 1][:, None]
        cache.commit(torch.arange(width, device=self.device).expand_as(rows), base)
        zero = torch.zeros(draws.seeds.shape[0], 1, dtype=torch.int64, device=self.device)
        p0 = self._targets(last, zero)[:, 0]
        return draws.sample(p0, zero[:, 0], Stream.SAMPLE)

    def _draft(self, slots: Slots, draws: Draws) -> Window:
        b, w = slots.positions.shape
        if w:
            tokens, q = self.parts.drafter.draft(slots, draws)
        else:
            tokens, q = slots.old_tokens, slots.old_q
        d = self.shape.depth if self.shape.tree else 0
        if d:
            return Window(tokens, q, *self.parts.tree.expand(tokens[:, :d], q[:, :d], slots.positions[:, :d], draws))
        return Window(tokens, q, *self._no_tree(b))

    def _no_tree(self, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.zeros(b, 0, 1, dtype=torch.int64, device=self.device),
                torch.zeros(b, 0, 1, dtype=torch.bool, device=self.device))
